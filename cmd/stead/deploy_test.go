package main

import (
	"bufio"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/steadkit/stead/internal/testing/fronttest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/engine/enginetest/testkit"
)

// root is the module's root, where the image is built from.
const root = "../.."

// instruction is one line of a Dockerfile: its keyword and the rest.
type instruction struct{ keyword, args string }

// stage is a Dockerfile's stage: its FROM line and its instructions.
type stage struct {
	from         string
	instructions []instruction
}

// readDockerfile reads deploy/Dockerfile's stages.
func readDockerfile() ([]stage, error) {
	b, err := os.ReadFile(filepath.Join(root, "deploy", "Dockerfile"))
	if err != nil {
		return nil, err
	}
	var stages []stage
	for _, line := range strings.Split(strings.ReplaceAll(string(b), "\\\n", " "), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		keyword, args, _ := strings.Cut(line, " ")
		keyword = strings.ToUpper(keyword)
		if keyword == "FROM" {
			stages = append(stages, stage{from: args})
			continue
		}
		if len(stages) == 0 {
			return nil, fmt.Errorf("deploy/Dockerfile: %s before FROM", keyword)
		}
		s := &stages[len(stages)-1]
		s.instructions = append(s.instructions, instruction{keyword, strings.TrimSpace(args)})
	}
	return stages, nil
}

// buildCommand returns the build stage's go build command: the variables
// it sets and its arguments.
func buildCommand(stages []stage) (env, argv []string, err error) {
	for _, s := range stages {
		for _, in := range s.instructions {
			fields := strings.Fields(in.args)
			i := 0
			for i < len(fields) && strings.Contains(fields[i], "=") {
				i++
			}
			if in.keyword == "RUN" && len(fields) > i+1 && fields[i] == "go" && fields[i+1] == "build" {
				return fields[:i], fields[i:], nil
			}
		}
	}
	return nil, nil, errors.New("deploy/Dockerfile runs no go build")
}

// buildAsImage builds the stead command into dir as deploy/Dockerfile's
// build stage does, its -o redirected, and returns the binary's path.
func buildAsImage(dir string) (string, error) {
	stages, err := readDockerfile()
	if err != nil {
		return "", err
	}
	env, argv, err := buildCommand(stages)
	if err != nil {
		return "", err
	}
	binary := filepath.Join(dir, "stead")
	for i := range argv {
		if argv[i] == "-o" && i+1 < len(argv) {
			argv[i+1] = binary
		}
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	// The image's build stamps the VCS revision; so does this one, though
	// the environment may turn stamping off for the other builds.
	goflags := strings.ReplaceAll(os.Getenv("GOFLAGS"), "-buildvcs=false", "")
	cmd.Dir, cmd.Env = root, append(os.Environ(), append(env, "GOFLAGS="+goflags)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return binary, nil
}

// jsonArgs reads an exec-form ENTRYPOINT or CMD.
func jsonArgs(t *testing.T, in instruction) []string {
	t.Helper()
	var out []string
	if err := json.Unmarshal([]byte(in.args), &out); err != nil {
		t.Fatalf("deploy/Dockerfile: %s %s is not the exec form: %v", in.keyword, in.args, err)
	}
	return out
}

// TestDockerfile checks what can be checked of the image without docker:
// its build stage compiles the stead command (this test runs that build),
// statically, and the final stage, from distroless or scratch, runs that
// binary with the image's CMD, which this test runs: stead version, then
// stead serve with the image's config file until SIGTERM.
func TestDockerfile(t *testing.T) {
	t.Parallel()
	binary, err := buildAsImage(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	stages, err := readDockerfile()
	if err != nil {
		t.Fatal(err)
	}
	if len(stages) < 2 || !strings.HasPrefix(stages[0].from, "golang:") || !strings.HasSuffix(stages[0].from, " AS build") {
		t.Fatalf("deploy/Dockerfile's first stage is FROM %q, want a golang image AS build", stages[0].from)
	}
	final := stages[len(stages)-1]
	if !strings.HasPrefix(final.from, "gcr.io/distroless/static") && final.from != "scratch" {
		t.Errorf("deploy/Dockerfile's image is FROM %q, want gcr.io/distroless/static or scratch", final.from)
	}
	env, argv, err := buildCommand(stages)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(env, " ") != "CGO_ENABLED=0" || argv[len(argv)-1] != "./cmd/stead" {
		t.Errorf("deploy/Dockerfile builds with %q %q, want CGO_ENABLED=0 go build … ./cmd/stead", env, argv)
	}
	out := ""
	for i := range argv {
		if argv[i] == "-o" && i+1 < len(argv) {
			out = argv[i+1]
		}
	}
	// Where the image puts what it copies: the binary, and files of the
	// repository (the config), which the test reads where they are.
	var entrypoint, cmd []string
	copied := map[string]string{} // image path → path here
	for _, in := range final.instructions {
		switch in.keyword {
		case "COPY":
			fields := strings.Fields(in.args)
			src, dst := fields[len(fields)-2], fields[len(fields)-1]
			switch {
			case strings.Contains(in.args, "--from=build") && src == out:
				copied[dst] = binary
			case !strings.Contains(in.args, "--from="):
				copied[dst] = filepath.Join(root, src)
			}
		case "ENTRYPOINT":
			entrypoint = jsonArgs(t, in)
		case "CMD":
			cmd = jsonArgs(t, in)
		}
	}
	if len(entrypoint) != 1 || copied[entrypoint[0]] != binary {
		t.Fatalf("deploy/Dockerfile's ENTRYPOINT %q is not the binary its build stage made (%s)", entrypoint, out)
	}
	for i, a := range cmd {
		if here, ok := copied[a]; ok {
			cmd[i] = here
		}
	}

	version, err := exec.Command(binary, "version").Output()
	if err != nil || !strings.HasPrefix(string(version), "stead ") {
		t.Fatalf("stead version = %q, %v", version, err)
	}
	// The revision the build stamped, if it did (a checkout whose VCS the
	// go command could read), is printed.
	bi, err := buildinfo.ReadFile(binary)
	if err != nil {
		t.Fatal(err)
	}
	for _, set := range bi.Settings {
		if want := "revision " + set.Value; set.Key == "vcs.revision" && !strings.Contains(string(version), want) {
			t.Errorf("stead version = %q, want a line %q", version, want)
		}
	}

	// The image's settings, but for the address (a free loopback port)
	// and the store (a temporary file): the environment overrides them.
	db := "sqlite://" + filepath.Join(t.TempDir(), "stead.db")
	serve := exec.Command(binary, cmd...)
	serve.Env = append(os.Environ(), "STEAD_ADDR=127.0.0.1:0", "STEAD_DB="+db, "STEAD_TOKEN=secret")
	stdout, err := serve.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	serve.Stderr = os.Stderr
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- serve.Wait() }()
	t.Cleanup(func() { serve.Process.Kill(); <-done })
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || !strings.Contains(lines.Text(), "stead serving") {
		t.Fatalf("stead %s printed %q", strings.Join(cmd, " "), lines.Text())
	}
	base := lines.Text()[strings.Index(lines.Text(), "http://"):]
	c := client{t: t, base: base, token: "secret"}
	check(t, "GET /healthz", c.do("GET", "/healthz", ""), 200, "")
	check(t, "GET /v1/info", c.do("GET", "/v1/info", ""), 200, "")
	// The image's config turns the access log on.
	if !lines.Scan() || !strings.Contains(lines.Text(), "msg=access") {
		t.Errorf("no access log line after a request: %q", lines.Text())
	}
	go func() {
		for lines.Scan() {
		}
	}()
	serve.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		done <- err
		if err != nil {
			t.Fatalf("stead serve after SIGTERM: %v", err)
		}
	case <-time.After(testkit.Timeout):
		t.Fatal("stead serve did not stop after SIGTERM")
	}
}

// TestInterruptedExits130 interrupts a stead lock waiting for a lock held
// elsewhere, as Ctrl-C would: it exits 130.
func TestInterruptedExits130(t *testing.T) {
	t.Parallel()
	db := "sqlite://" + filepath.Join(t.TempDir(), "stead.db")
	st, err := stead.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, ok, err := st.Locks.TryLock(context.Background(), "job", "holder", time.Hour); !ok || err != nil {
		t.Fatalf("TryLock = %v, %v", ok, err)
	}
	cmd := exec.Command(os.Args[0], "--db", db, "lock", "job", "--", "true")
	cmd.Env = append(os.Environ(), asStead+"=1")
	stderr := &testkit.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	testkit.Until(t, "stead lock to wait", func() bool { return strings.Contains(stderr.String(), "waiting for") })
	cmd.Process.Signal(os.Interrupt)
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 130 {
		t.Fatalf("stead lock interrupted = %v (stderr %q), want exit 130", err, stderr)
	}
}

// TestServiceUnit checks deploy/stead.service: systemd-analyze verify
// accepts it (when installed, with its ExecStart's binary the one built
// here), it keeps its hardening, and its ExecStart runs as stead serve
// does.
func TestServiceUnit(t *testing.T) {
	t.Parallel()
	text, err := os.ReadFile(filepath.Join(root, "deploy", "stead.service"))
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string][]string{} // section.key → values
	section := ""
	for n, line := range strings.Split(string(text), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("deploy/stead.service line %d: %q is no key=value in a section", n+1, line)
			}
			keys[section+"."+k] = append(keys[section+"."+k], v)
		}
	}
	for key, want := range map[string]string{
		"Service.NoNewPrivileges": "yes", "Service.ProtectSystem": "strict", "Service.ProtectHome": "yes",
		"Service.PrivateTmp": "yes", "Service.PrivateDevices": "yes", "Service.DynamicUser": "yes",
		"Service.ReadWritePaths": "/var/lib/stead", "Service.CapabilityBoundingSet": "",
		"Service.RestrictSUIDSGID": "yes", "Service.MemoryDenyWriteExecute": "yes", "Install.WantedBy": "multi-user.target",
	} {
		if got := keys[key]; len(got) != 1 || got[0] != want {
			t.Errorf("deploy/stead.service %s = %q, want %q", key, got, want)
		}
	}
	exe := keys["Service.ExecStart"]
	if len(exe) != 1 || !strings.HasPrefix(exe[0], "/usr/local/bin/stead serve ") {
		t.Fatalf("deploy/stead.service ExecStart = %q, want /usr/local/bin/stead serve …", exe)
	}
	analyze := fronttest.Tool(t, "systemd-analyze", "STEAD_SYSTEMD_ANALYZE", "STEAD_REQUIRE_SYSTEMD_ANALYZE")
	unit := filepath.Join(t.TempDir(), "stead.service")
	if err := os.WriteFile(unit, []byte(strings.ReplaceAll(string(text), "/usr/local/bin/stead", os.Args[0])), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(analyze, "verify", unit).CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify deploy/stead.service: %v\n%s", err, out)
	}
	// The unit's command line is one stead accepts: its config file, as
	// the unit installs it, parses (a missing one would exit 2 at once).
	args := strings.Fields(strings.TrimPrefix(exe[0], "/usr/local/bin/stead "))
	for i, a := range args {
		if a == "/etc/stead/stead.yaml" {
			args[i] = filepath.Join(root, "deploy", "stead.yaml")
		}
	}
	check := exec.Command(os.Args[0], append(args, "--help")...)
	check.Env = append(os.Environ(), asStead+"=1")
	if out, err := check.CombinedOutput(); err != nil {
		t.Errorf("stead %s --help: %v\n%s", strings.Join(args, " "), err, out)
	}
}
