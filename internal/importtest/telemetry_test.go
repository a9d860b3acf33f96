package importtest

import (
	"strings"
	"testing"
)

// The relay's OpenTelemetry SDK, its exporters (Prometheus, OTLP/HTTP) and
// what they pull in (client_golang, protobuf, grpc through the OTLP proto
// package) are imported by internal/cli only: an application that imports
// the dispatcher and every publisher builds and tidies without any of them
// in its go.mod. The library itself depends on the OpenTelemetry API.
func TestImporterInheritsNoTelemetrySDKOrExporter(t *testing.T) {
	t.Parallel()
	m := tidyImporter(t,
		"github.com/pgoutbox/pgoutbox/publisher/jetstream",
		"github.com/pgoutbox/pgoutbox/publisher/kafka",
		"github.com/pgoutbox/pgoutbox/publisher/rabbitmq",
		"github.com/pgoutbox/pgoutbox/publisher/stdout",
		"github.com/pgoutbox/pgoutbox/publisher/webhook",
	)
	for _, r := range m.Require {
		for _, banned := range []string{"otel/sdk", "otel/exporters", "opentelemetry.io/proto", "prometheus", "grpc", "protobuf", "genproto"} {
			if strings.Contains(r.Path, banned) {
				t.Errorf("importer inherits %s %s (the relay's telemetry SDK or one of its requirements)", r.Path, r.Version)
			}
		}
	}
}
