// Package deploy checks the deployment files that cannot run on a machine
// without Docker or Kubernetes: every Kubernetes manifest decodes strictly
// into the Kubernetes API types (an unknown or misspelled field, or a value
// of the wrong type, fails: the schema check), and the settings that must
// agree with the relay do (probe paths and port, the shutdown budget, the
// Secrets referenced, non-root). The systemd unit is checked by
// systemd-analyze verify (systemd/verify.sh, `make release-check`); the
// probe endpoints themselves by internal/cli's TestRun_Probes...
package deploy

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// manifests are the decoded objects of kubernetes/*.yaml, by kind and name.
type manifests struct {
	deployments map[string]*appsv1.Deployment
	jobs        map[string]*batchv1.Job
	secrets     map[string]*corev1.Secret
	files       []string
}

func load(t *testing.T) manifests {
	t.Helper()
	m := manifests{deployments: map[string]*appsv1.Deployment{}, jobs: map[string]*batchv1.Job{}, secrets: map[string]*corev1.Secret{}}
	paths, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no manifests in kubernetes/: %v", err)
	}
	for _, p := range paths {
		base := filepath.Base(p)
		if base == "kustomization.yaml" {
			continue
		}
		m.files = append(m.files, base)
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(raw), -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			var meta struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
			}
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("%s document %d: %v", p, i, err)
			}
			var obj any
			var name func() string
			switch meta.APIVersion + " " + meta.Kind {
			case "apps/v1 Deployment":
				d := &appsv1.Deployment{}
				obj, name = d, func() string { m.deployments[d.Name] = d; return d.Name }
			case "batch/v1 Job":
				j := &batchv1.Job{}
				obj, name = j, func() string { m.jobs[j.Name] = j; return j.Name }
			case "v1 Secret":
				s := &corev1.Secret{}
				obj, name = s, func() string { m.secrets[s.Name] = s; return s.Name }
			default:
				t.Fatalf("%s document %d: unexpected %s %s (add it to the test)", p, i, meta.APIVersion, meta.Kind)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				t.Fatalf("%s document %d (%s): does not match the Kubernetes API schema: %v", p, i, meta.Kind, err)
			}
			if name() == "" {
				t.Fatalf("%s document %d (%s) has no metadata.name", p, i, meta.Kind)
			}
		}
	}
	return m
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// flagValue returns the value of --name=value or --name value in args.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
		if a == "--"+name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

// shutdownBudget is the longest a graceful stop can take with the given
// --shutdown-timeout: publishes get the timeout, then are cancelled and
// waited for up to the timeout again, the final flush gets
// ShutdownFlushDefault, the metrics server 2s.
func shutdownBudget(timeout time.Duration) time.Duration {
	return 2*timeout + dispatcher.ShutdownFlushDefault + 2*time.Second
}

func TestKubernetes_ManifestsMatchTheAPISchema(t *testing.T) {
	m := load(t)
	if len(m.deployments) != 1 || len(m.jobs) != 1 || len(m.secrets) != 2 {
		t.Fatalf("found %d deployments, %d jobs, %d secrets; want 1, 1, 2", len(m.deployments), len(m.jobs), len(m.secrets))
	}
}

func TestKubernetes_KustomizationListsEveryManifest(t *testing.T) {
	m := load(t)
	raw, err := os.ReadFile("kubernetes/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
	}
	if err := yaml.UnmarshalStrict(raw, &k); err != nil {
		t.Fatal(err)
	}
	slices.Sort(k.Resources)
	slices.Sort(m.files)
	if k.Kind != "Kustomization" || !slices.Equal(k.Resources, m.files) {
		t.Fatalf("kustomization %s lists %v, want every manifest %v", k.Kind, k.Resources, m.files)
	}
}

func TestKubernetes_RelayProbesShutdownAndSecrets(t *testing.T) {
	m := load(t)
	d := m.deployments["pgoutbox-relay"]
	if d == nil {
		t.Fatal("no Deployment pgoutbox-relay")
	}
	spec := d.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(spec.Containers))
	}
	c := spec.Containers[0]
	if len(c.Args) == 0 || c.Args[0] != "run" {
		t.Fatalf("args %v, want the run command", c.Args)
	}
	for k, v := range d.Spec.Selector.MatchLabels {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("selector label %s=%s is not on the pod template", k, v)
		}
	}

	// Probes on the port that --metrics-addr serves.
	addr, ok := flagValue(c.Args, "metrics-addr")
	if !ok {
		t.Fatal("no --metrics-addr: the probes would have nothing to ask")
	}
	_, port, _ := strings.Cut(addr, ":")
	var portName string
	for _, p := range c.Ports {
		if p.ContainerPort > 0 && port == strconv.Itoa(int(p.ContainerPort)) {
			portName = p.Name
		}
	}
	if portName == "" {
		t.Fatalf("no container port for --metrics-addr %s", addr)
	}
	for _, pr := range []struct {
		what  string
		probe *corev1.Probe
		path  string
	}{{"readiness", c.ReadinessProbe, "/healthz"}, {"liveness", c.LivenessProbe, "/livez"}} {
		if pr.probe == nil || pr.probe.HTTPGet == nil {
			t.Errorf("%s probe missing or not an HTTP GET", pr.what)
			continue
		}
		if pr.probe.HTTPGet.Path != pr.path || pr.probe.HTTPGet.Port.String() != portName {
			t.Errorf("%s probe GET %s on port %s, want %s on %s", pr.what, pr.probe.HTTPGet.Path, pr.probe.HTTPGet.Port.String(), pr.path, portName)
		}
	}

	// The grace period covers the longest graceful shutdown.
	timeout := dispatcher.ShutdownTimeoutDefault
	if v, ok := flagValue(c.Args, "shutdown-timeout"); ok {
		var err error
		if timeout, err = time.ParseDuration(v); err != nil {
			t.Fatalf("--shutdown-timeout %q: %v", v, err)
		}
	}
	if spec.TerminationGracePeriodSeconds == nil {
		t.Fatal("terminationGracePeriodSeconds not set (Kubernetes' default is 30s)")
	}
	grace := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	if grace <= shutdownBudget(timeout) {
		t.Errorf("terminationGracePeriodSeconds %s is not above the shutdown budget %s (--shutdown-timeout %s)", grace, shutdownBudget(timeout), timeout)
	}

	// Non-root, read-only, no privilege escalation.
	if sc := spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
		t.Error("the pod does not run as a non-root user")
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("the container's file system is writable or it may escalate privileges")
	}

	// The connection settings come from a Secret that exists and has a
	// DATABASE_URL, not from the manifest.
	checkSecretRefs(t, m, "Deployment pgoutbox-relay", c)
	for _, e := range c.Env {
		if strings.Contains(e.Value, "://") {
			t.Errorf("env %s carries a URL in the manifest; put it in the Secret", e.Name)
		}
	}
}

func TestKubernetes_MigrateJobRunsAsTheOwner(t *testing.T) {
	m := load(t)
	j := m.jobs["pgoutbox-migrate"]
	if j == nil {
		t.Fatal("no Job pgoutbox-migrate")
	}
	c := j.Spec.Template.Spec.Containers[0]
	if !slices.Equal(c.Args, []string{"migrate", "up"}) {
		t.Errorf("args %v, want migrate up", c.Args)
	}
	if j.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyNever && j.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyOnFailure {
		t.Errorf("restartPolicy %q is not valid for a Job", j.Spec.Template.Spec.RestartPolicy)
	}
	checkSecretRefs(t, m, "Job pgoutbox-migrate", c)
	if c.EnvFrom[0].SecretRef.Name == m.deployments["pgoutbox-relay"].Spec.Template.Spec.Containers[0].EnvFrom[0].SecretRef.Name {
		t.Error("the migration Job uses the relay's Secret; migrations need the table owner")
	}
}

func checkSecretRefs(t *testing.T, m manifests, what string, c corev1.Container) {
	t.Helper()
	if len(c.EnvFrom) == 0 {
		t.Fatalf("%s: no envFrom Secret", what)
	}
	for _, ef := range c.EnvFrom {
		if ef.SecretRef == nil {
			t.Errorf("%s: envFrom without a secretRef", what)
			continue
		}
		s := m.secrets[ef.SecretRef.Name]
		if s == nil {
			t.Errorf("%s: Secret %s is not defined", what, ef.SecretRef.Name)
			continue
		}
		if _, ok := s.StringData["DATABASE_URL"]; !ok {
			t.Errorf("%s: Secret %s has no DATABASE_URL", what, s.Name)
		}
	}
}

func TestSystemd_StopTimeoutCoversTheShutdown(t *testing.T) {
	raw, err := os.ReadFile("systemd/pgoutbox.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := string(raw)
	stop := regexp.MustCompile(`(?m)^TimeoutStopSec=(\d+)$`).FindStringSubmatch(unit)
	exec := regexp.MustCompile(`(?m)^ExecStart=(.*)$`).FindStringSubmatch(unit)
	if stop == nil || exec == nil {
		t.Fatal("the unit has no TimeoutStopSec=N or no ExecStart")
	}
	timeout := dispatcher.ShutdownTimeoutDefault
	if v, ok := flagValue(strings.Fields(exec[1]), "shutdown-timeout"); ok {
		if timeout, err = time.ParseDuration(v); err != nil {
			t.Fatal(err)
		}
	}
	if got := atoiDur(t, stop[1]); got <= shutdownBudget(timeout) {
		t.Errorf("TimeoutStopSec %s is not above the shutdown budget %s", got, shutdownBudget(timeout))
	}
	for _, want := range []string{"KillSignal=SIGTERM", "DynamicUser=yes", "EnvironmentFile="} {
		if !strings.Contains(unit, want) {
			t.Errorf("the unit lacks %s", want)
		}
	}
}

// The image: a static binary as PID 1 (exec-form ENTRYPOINT, so SIGTERM
// reaches the relay, not a shell), a non-root numeric user, an empty base.
func TestDockerfile_StaticNonRootAndSignalsReachTheRelay(t *testing.T) {
	raw, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var froms, users []string
	var entry string
	for _, line := range bytes.Split(raw, []byte("\n")) {
		l := strings.TrimSpace(string(line))
		switch {
		case strings.HasPrefix(l, "FROM "):
			froms = append(froms, l)
		case strings.HasPrefix(l, "USER "):
			users = append(users, strings.TrimPrefix(l, "USER "))
		case strings.HasPrefix(l, "ENTRYPOINT "):
			entry = strings.TrimPrefix(l, "ENTRYPOINT ")
		}
	}
	if len(froms) < 2 || froms[len(froms)-1] != "FROM scratch" {
		t.Errorf("stages %v: want a multi-stage build ending FROM scratch", froms)
	}
	if len(users) == 0 || !regexp.MustCompile(`^[1-9]\d*:[1-9]\d*$`).MatchString(users[len(users)-1]) {
		t.Errorf("USER %v: want a numeric non-root uid:gid (runAsNonRoot checks numbers)", users)
	}
	if !strings.HasPrefix(entry, "[") {
		t.Errorf("ENTRYPOINT %s: want the exec form, so that the relay is PID 1 and gets SIGTERM", entry)
	}
	if !bytes.Contains(raw, []byte("CGO_ENABLED=0")) || !bytes.Contains(raw, []byte("internal/buildinfo.Version=")) {
		t.Error("the build is not static or does not link the version in")
	}
}

func atoiDur(t *testing.T, s string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(s + "s")
	if err != nil {
		t.Fatal(err)
	}
	return d
}
