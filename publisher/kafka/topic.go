package kafka

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"text/template"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// maxTopicLen is Kafka's limit on topic name length.
const maxTopicLen = 249

func parseTopicTemplate(text string) (*template.Template, error) {
	return template.New("topic").
		Option("missingkey=zero").
		Funcs(template.FuncMap{"lower": strings.ToLower, "upper": strings.ToUpper}).
		Parse(text)
}

func renderTopic(tmpl *template.Template, msg dispatcher.Message) (string, error) {
	var b strings.Builder
	if err := tmpl.Execute(&b, msg); err != nil {
		return "", err
	}
	return strings.TrimSpace(b.String()), nil
}

// topicFor returns the topic of msg; its errors are permanent.
func (p *Publisher) topicFor(msg dispatcher.Message) (string, error) {
	if p.tmpl == nil {
		return p.cfg.Topic, nil
	}
	topic, err := renderTopic(p.tmpl, msg)
	if err != nil {
		return "", fmt.Errorf("kafka: topic template: %w", err)
	}
	if topic == "" {
		if p.cfg.Topic == "" {
			return "", fmt.Errorf("kafka: %s rendered an empty topic and %s is not set",
				cmp.Or(p.cfg.FieldNames["TopicTemplate"], "the topic template"), cmp.Or(p.cfg.FieldNames["Topic"], "Config.Topic"))
		}
		return p.cfg.Topic, nil
	}
	if err := validTopic(topic); err != nil {
		return "", fmt.Errorf("kafka: topic template: %w", err)
	}
	return topic, nil
}

// validTopic applies Kafka's topic name rules.
func validTopic(topic string) error {
	switch {
	case topic == "":
		return errors.New("topic name is empty")
	case len(topic) > maxTopicLen:
		return fmt.Errorf("topic name is %d characters long, the limit is %d", len(topic), maxTopicLen)
	case topic == "." || topic == "..":
		return fmt.Errorf("topic name %q is not allowed", topic)
	}
	for _, c := range []byte(topic) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("topic name %q has a character outside [a-zA-Z0-9._-]", topic)
		}
	}
	return nil
}
