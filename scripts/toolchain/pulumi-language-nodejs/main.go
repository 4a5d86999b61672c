// Command pulumi-language-nodejs is the Node.js language host the Pulumi CLI starts for `pulumi up` of a
// program directory (Pulumi.yaml `runtime: nodejs`). Pulumi's own host is a separate Go module
// (github.com/pulumi/pulumi/sdk/nodejs/cmd/pulumi-language-nodejs/v3) that the Go module proxy here does
// not serve at any version, so the project builds this one against sdk/v3 at the CLI's pinned version.
//
// It runs the program the way Pulumi's host does: `node <nodeargs> @pulumi/pulumi/cmd/run <flags> <main>`
// with the stack's config in PULUMI_CONFIG, and maps the exit code to the engine's Run result. Plugins are
// not discovered from package.json: the engine loads them on demand (ambient plugins on PATH).
//
// RunPlugin runs a plugin written in Node.js, a policy pack above all (`--policy-pack`): `node <nodeargs>
// @pulumi/pulumi/cmd/run-policy-pack <engine> <pack directory>` (other kinds: cmd/run-plugin <directory>),
// streaming the plugin's stdout (where it prints its port) and stderr back to the engine, then its exit code.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/shlex"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/rpcutil"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"
)

// version is set by the build (-X main.version=...) to the CLI's version.
var version = "3.0.0-dev"

// The Node.js SDK exits with this code after it has reported an error to the engine itself
// (@pulumi/pulumi cmd/run: nodeJSProcessExitedAfterLoggingUserActionableMessage).
const exitedAfterReportingError = 32

func main() {
	// Flags Pulumi's host accepts; options in Pulumi.yaml reach Run through ProgramInfo instead.
	flag.String("tracing", "", "Emit tracing to a Zipkin-compatible tracing endpoint")
	flag.String("root", "", "Project root path to use")
	flag.Parse()

	h := &host{}
	if flag.NArg() > 0 {
		h.engineAddress = flag.Arg(0)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if h.engineAddress != "" {
		// Exit when the engine is gone rather than linger as an orphan.
		if err := rpcutil.Healthcheck(ctx, h.engineAddress, 5*time.Minute, cancel); err != nil {
			fail(fmt.Errorf("could not reach the engine at %s: %w", h.engineAddress, err))
		}
	}
	done := make(chan bool)
	go func() {
		<-ctx.Done()
		close(done)
	}()
	handle, err := rpcutil.ServeWithOptions(rpcutil.ServeOptions{
		Cancel: done,
		Init: func(srv *grpc.Server) error {
			pulumirpc.RegisterLanguageRuntimeServer(srv, h)
			return nil
		},
		Options: rpcutil.OpenTracingServerInterceptorOptions(nil),
	})
	if err != nil {
		fail(fmt.Errorf("could not start the language host RPC server: %w", err))
	}
	// The engine reads the port from the first line of stdout.
	fmt.Printf("%d\n", handle.Port)
	if err := <-handle.Done; err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "pulumi-language-nodejs: %v\n", err)
	os.Exit(1)
}

type host struct {
	pulumirpc.UnimplementedLanguageRuntimeServer

	mu            sync.Mutex
	engineAddress string
}

func (h *host) engine() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.engineAddress
}

func (h *host) Handshake(
	_ context.Context, req *pulumirpc.LanguageHandshakeRequest,
) (*pulumirpc.LanguageHandshakeResponse, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if req.GetEngineAddress() != "" {
		h.engineAddress = req.GetEngineAddress()
	}
	return &pulumirpc.LanguageHandshakeResponse{}, nil
}

func (h *host) GetPluginInfo(context.Context, *emptypb.Empty) (*pulumirpc.PluginInfo, error) {
	return &pulumirpc.PluginInfo{Version: version}, nil
}

// Required plugins are not read from node_modules: every provider this project uses is an ambient
// plugin on PATH, which the engine loads when the program first registers one of its resources.
func (h *host) GetRequiredPlugins(
	context.Context, *pulumirpc.GetRequiredPluginsRequest,
) (*pulumirpc.GetRequiredPluginsResponse, error) {
	return &pulumirpc.GetRequiredPluginsResponse{}, nil
}

func (h *host) GetRequiredPackages(
	context.Context, *pulumirpc.GetRequiredPackagesRequest,
) (*pulumirpc.GetRequiredPackagesResponse, error) {
	return &pulumirpc.GetRequiredPackagesResponse{}, nil
}

func (h *host) GetProgramDependencies(
	context.Context, *pulumirpc.GetProgramDependenciesRequest,
) (*pulumirpc.GetProgramDependenciesResponse, error) {
	return &pulumirpc.GetProgramDependenciesResponse{}, nil
}

func (h *host) RuntimeOptionsPrompts(
	context.Context, *pulumirpc.RuntimeOptionsRequest,
) (*pulumirpc.RuntimeOptionsResponse, error) {
	return &pulumirpc.RuntimeOptionsResponse{}, nil
}

// Dependencies are installed by the project's own setup (npm ci), never by the engine.
func (h *host) InstallDependencies(
	*pulumirpc.InstallDependenciesRequest, grpc.ServerStreamingServer[pulumirpc.InstallDependenciesResponse],
) error {
	return nil
}

func (h *host) About(context.Context, *pulumirpc.AboutRequest) (*pulumirpc.AboutResponse, error) {
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, errors.New("node is not on PATH")
	}
	out, err := exec.Command(node, "--version").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --version: %w", node, err)
	}
	return &pulumirpc.AboutResponse{Executable: node, Version: strings.TrimSpace(string(out))}, nil
}

// runScript finds @pulumi/pulumi's program runner in the node_modules nearest to dir (or above it).
func runScript(dir string) (string, error) {
	return sdkScript(dir, "run")
}

// sdkScript finds @pulumi/pulumi's cmd/<name> entry (run, run-plugin, run-policy-pack) in the
// node_modules nearest to dir (or above it).
func sdkScript(dir, name string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		candidate := filepath.Join(d, "node_modules", "@pulumi", "pulumi", "cmd", name, "index.js")
		if _, err := os.Stat(candidate); err == nil {
			return filepath.Dir(candidate), nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("@pulumi/pulumi is not installed in %s or above it (run npm ci)", dir)
		}
	}
}

func optionString(options map[string]any, key string) (string, error) {
	value, ok := options[key]
	if !ok || value == nil {
		return "", nil
	}
	text, ok := value.(string)
	if !ok {
		return "", fmt.Errorf("runtime option %q must be a string, got %v", key, value)
	}
	return text, nil
}

func optionBool(options map[string]any, key string, fallback bool) (bool, error) {
	value, ok := options[key]
	if !ok || value == nil {
		return fallback, nil
	}
	flag, ok := value.(bool)
	if !ok {
		return false, fmt.Errorf("runtime option %q must be true or false, got %v", key, value)
	}
	return flag, nil
}

// nodeCommand builds the node invocation and its extra environment for one Run request.
func (h *host) nodeCommand(req *pulumirpc.RunRequest) ([]string, []string, error) {
	info := req.GetInfo()
	programDir, entryPoint := req.GetPwd(), req.GetProgram()
	rootDir := req.GetPwd()
	options := map[string]any{}
	if info != nil {
		if info.GetProgramDirectory() != "" {
			programDir = info.GetProgramDirectory()
		}
		if info.GetEntryPoint() != "" {
			entryPoint = info.GetEntryPoint()
		}
		if info.GetRootDirectory() != "" {
			rootDir = info.GetRootDirectory()
		}
		if info.GetOptions() != nil {
			options = info.GetOptions().AsMap()
		}
	}
	nodeargs, err := optionString(options, "nodeargs")
	if err != nil {
		return nil, nil, err
	}
	typescript, err := optionBool(options, "typescript", true)
	if err != nil {
		return nil, nil, err
	}
	tsconfig, err := optionString(options, "tsconfig")
	if err != nil {
		return nil, nil, err
	}
	script, err := runScript(programDir)
	if err != nil {
		return nil, nil, err
	}

	args, err := shlex.Split(nodeargs)
	if err != nil {
		return nil, nil, fmt.Errorf("runtime option nodeargs: %w", err)
	}
	args = append(args, script,
		"--monitor", req.GetMonitorAddress(),
		"--project", req.GetProject(),
		"--stack", req.GetStack(),
		"--root-directory", rootDir,
		"--parallel", strconv.Itoa(int(req.GetParallel())),
	)
	if engine := h.engine(); engine != "" {
		args = append(args, "--engine", engine)
	}
	if req.GetOrganization() != "" {
		args = append(args, "--organization", req.GetOrganization())
	}
	if req.GetDryRun() {
		args = append(args, "--dry-run")
	}
	// "." means the package.json's main; cmd/run resolves it from its working directory.
	if entryPoint == "." || entryPoint == "" {
		args = append(args, "--pwd", programDir, ".")
	} else {
		args = append(args, "--pwd", req.GetPwd(), filepath.Join(programDir, entryPoint))
	}
	args = append(args, req.GetArgs()...)

	config, err := json.Marshal(req.GetConfig())
	if err != nil {
		return nil, nil, err
	}
	secretKeys := req.GetConfigSecretKeys()
	if secretKeys == nil {
		secretKeys = []string{}
	}
	secrets, err := json.Marshal(secretKeys)
	if err != nil {
		return nil, nil, err
	}
	env := []string{
		"PULUMI_CONFIG=" + string(config),
		"PULUMI_CONFIG_SECRET_KEYS=" + string(secrets),
		"PULUMI_NODEJS_TYPESCRIPT=" + strconv.FormatBool(typescript),
	}
	if tsconfig != "" {
		env = append(env, "PULUMI_NODEJS_TSCONFIG_PATH="+tsconfig)
	}
	return args, env, nil
}

func (h *host) Run(ctx context.Context, req *pulumirpc.RunRequest) (*pulumirpc.RunResponse, error) {
	args, env, err := h.nodeCommand(req)
	if err != nil {
		return &pulumirpc.RunResponse{Error: err.Error()}, nil
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return &pulumirpc.RunResponse{Error: "node is not on PATH: install Node.js"}, nil
	}
	cmd := exec.CommandContext(ctx, node, args...)
	cmd.Dir = req.GetPwd()
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout = os.Stdout
	cmd.Stderr = os.Stderr
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return &pulumirpc.RunResponse{}, nil
	case errors.As(err, &exit) && exit.ExitCode() == exitedAfterReportingError:
		return &pulumirpc.RunResponse{Bail: true}, nil
	case errors.As(err, &exit):
		return &pulumirpc.RunResponse{
			Error: fmt.Sprintf("Program exited with non-zero exit code: %d", exit.ExitCode()),
		}, nil
	default:
		return &pulumirpc.RunResponse{Error: fmt.Sprintf("could not run %s: %v", node, err)}, nil
	}
}

// pluginCommand builds the node invocation and its extra environment for one RunPlugin request.
func pluginCommand(req *pulumirpc.RunPluginRequest) ([]string, []string, error) {
	info := req.GetInfo()
	if info == nil || info.GetProgramDirectory() == "" {
		return nil, nil, errors.New("RunPlugin: the request names no plugin directory")
	}
	pluginDir := info.GetProgramDirectory()
	program := pluginDir
	if entry := info.GetEntryPoint(); entry != "" && entry != "." {
		program = filepath.Join(pluginDir, entry)
	}
	options := map[string]any{}
	if info.GetOptions() != nil {
		options = info.GetOptions().AsMap()
	}
	nodeargs, err := optionString(options, "nodeargs")
	if err != nil {
		return nil, nil, err
	}
	// cmd/run-policy-pack and cmd/run-plugin always register ts-node (a vendored 7.0.1 unless the project
	// has its own), whatever PULUMI_NODEJS_TYPESCRIPT says. A pack whose nodeargs bring their own loader
	// (`--import=tsx`) must not get ts-node on top of it: ts-node would compile the TypeScript to
	// CommonJS that Node then loads as an ES module. So `typescript` defaults to false when nodeargs are
	// given, and with typescript off ts-node is told to ignore every file, leaving them to the loader.
	typescript, err := optionBool(options, "typescript", strings.TrimSpace(nodeargs) == "")
	if err != nil {
		return nil, nil, err
	}
	tsconfig, err := optionString(options, "tsconfig")
	if err != nil {
		return nil, nil, err
	}

	args, err := shlex.Split(nodeargs)
	if err != nil {
		return nil, nil, fmt.Errorf("runtime option nodeargs: %w", err)
	}
	if req.GetKind() == "analyzer" {
		// usage: run-policy-pack <engine-address> <program>; the engine passes its address in Args.
		script, err := sdkScript(pluginDir, "run-policy-pack")
		if err != nil {
			return nil, nil, err
		}
		args = append(args, script)
		args = append(args, req.GetArgs()...)
		args = append(args, program)
	} else {
		// usage: run-plugin <program> [args...]
		script, err := sdkScript(pluginDir, "run-plugin")
		if err != nil {
			return nil, nil, err
		}
		args = append(args, script, program)
		args = append(args, req.GetArgs()...)
	}

	env := append([]string{}, req.GetEnv()...)
	env = append(env, "PULUMI_NODEJS_TYPESCRIPT="+strconv.FormatBool(typescript))
	if !typescript {
		env = append(env, "TS_NODE_IGNORE=.")
	}
	if tsconfig != "" {
		env = append(env, "PULUMI_NODEJS_TSCONFIG_PATH="+tsconfig)
	}
	return args, env, nil
}

// streamWriter sends every chunk a plugin writes to stdout or stderr to the engine as one
// RunPluginResponse; a gRPC stream takes one Send at a time, hence the shared lock.
type streamWriter struct {
	mu     *sync.Mutex
	server grpc.ServerStreamingServer[pulumirpc.RunPluginResponse]
	stderr bool
}

func (w *streamWriter) Write(p []byte) (int, error) {
	data := append([]byte(nil), p...)
	resp := &pulumirpc.RunPluginResponse{Output: &pulumirpc.RunPluginResponse_Stdout{Stdout: data}}
	if w.stderr {
		resp = &pulumirpc.RunPluginResponse{Output: &pulumirpc.RunPluginResponse_Stderr{Stderr: data}}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.server.Send(resp); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (h *host) RunPlugin(
	req *pulumirpc.RunPluginRequest, server grpc.ServerStreamingServer[pulumirpc.RunPluginResponse],
) error {
	args, env, err := pluginCommand(req)
	if err != nil {
		return err
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return errors.New("node is not on PATH: install Node.js")
	}
	// The engine cancels the stream when it is done with the plugin; that ends the process too.
	cmd := exec.CommandContext(server.Context(), node, args...)
	// The npm package the plugin belongs to: @pulumi/policy reads the pack's version from
	// ./package.json, and the engine's own working directory is the stack program's, not the pack's.
	cmd.Dir = packageRoot(req.GetInfo().GetProgramDirectory())
	cmd.Env = append(os.Environ(), env...)
	// Non-*os.File writers: exec copies each pipe in its own goroutine and Wait returns only once both
	// are drained, so every byte is sent before the exit code.
	var mu sync.Mutex
	cmd.Stdout = &streamWriter{mu: &mu, server: server}
	cmd.Stderr = &streamWriter{mu: &mu, server: server, stderr: true}

	code := int32(0)
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			return fmt.Errorf("could not run %s: %w", node, err)
		}
		code = int32(exit.ExitCode())
	}
	mu.Lock()
	defer mu.Unlock()
	return server.Send(&pulumirpc.RunPluginResponse{Output: &pulumirpc.RunPluginResponse_Exitcode{Exitcode: code}})
}

// packageRoot is the directory of the package.json nearest to dir (dir itself, or above it), else dir.
func packageRoot(dir string) string {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "package.json")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			return dir
		}
	}
}
