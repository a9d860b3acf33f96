package console

import (
	"io/fs"
	"net/http"
)

// staticFiles serves the embedded stylesheet.
var staticFiles = func() http.Handler {
	static, _ := fs.Sub(assets, "static")
	return http.FileServerFS(static)
}()

func (c *Console) routes() {
	p := c.cfg.Prefix
	m := http.NewServeMux()
	m.HandleFunc("GET "+p+"/{$}", c.overview)
	m.HandleFunc("GET "+p+"/messages", c.messages)
	m.HandleFunc("GET "+p+"/messages/{id}", c.message)
	m.HandleFunc("GET "+p+"/dead", c.dead)
	m.HandleFunc("GET "+p+"/blocked", c.blocked)
	m.HandleFunc("GET "+p+"/relays", c.relays)
	m.HandleFunc("POST "+p+"/confirm", c.confirm)
	m.HandleFunc("POST "+p+"/apply", c.apply)
	m.Handle("GET "+p+"/static/", http.StripPrefix(p+"/static/", staticFiles))
	if p != "" {
		m.Handle("GET "+p, http.RedirectHandler(p+"/", http.StatusMovedPermanently))
	}
	c.mux = m
}
