package chart

import (
	"image/png"
	"os"
	"path/filepath"
	"testing"
)

func TestFormat(t *testing.T) {
	for in, want := range map[float64]string{0: "0", 5: "5", 2.5: "2.5", 1500: "1.5K", 25000: "25K", 2_000_000: "2M", 0.25: "0.25"} {
		if got := Format(in); got != want {
			t.Errorf("Format(%v) = %q, want %q", in, got, want)
		}
	}
}

func TestChartsRenderPNG(t *testing.T) {
	dir := t.TempDir()
	line := filepath.Join(dir, "line.png")
	err := Line{Title: "Throughput vs batch", XLabel: "batch", YLabel: "msg/s", LogX: true,
		Series: []Series{{Name: "a", X: []float64{50, 100, 500}, Y: []float64{10000, 20000, 35000}}}}.Save(line)
	if err != nil {
		t.Fatal(err)
	}
	bar := filepath.Join(dir, "bar.png")
	if err := (Bar{Title: "Drain", YLabel: "msg/s", Labels: []string{"x", "y"}, Values: []float64{3, 4}}).Save(bar); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{line, bar} {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if b := img.Bounds(); b.Dx() != 800 || b.Dy() != 480 {
			t.Errorf("%s: size %v", p, b)
		}
	}
}
