// Command specgate is the one binary: an OpenAI-compatible LLM gateway with a
// semantic cache and a local speculative-decoding engine.
//
// Usage: specgate [command] [flags]; serve is the default command. Flags may
// come before or after positional arguments. `specgate help` lists the
// commands; `specgate COMMAND --help` describes one (exit status 0).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// command is one subcommand. Each lives in its own file and registers itself
// in init, so that separate subcommands can be written independently.
type command struct {
	summary string
	run     func(args []string) error
}

var commands = map[string]command{}

func register(name, summary string, run func(args []string) error) {
	if _, dup := commands[name]; dup {
		panic("specgate: duplicate subcommand " + name)
	}
	commands[name] = command{summary: summary, run: run}
}

// usage lists the commands; "bench-x" commands are shown as "bench x".
func usage(w io.Writer) {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("usage: specgate <command> [arguments] [flags]   (no command: serve)\n\n")
	b.WriteString("  specgate                              serve the shipped model on http://127.0.0.1:8080\n")
	b.WriteString("  specgate serve MODEL_DIR --addr :9000 serve a Hugging Face Llama directory\n")
	b.WriteString("  specgate COMMAND --help               flags of one command\n\ncommands:\n")
	for _, n := range names {
		shown := n
		if rest, ok := strings.CutPrefix(n, "bench-"); ok {
			shown = "bench " + rest
		} else if n == "cache-bench" {
			shown = "bench cache"
		}
		fmt.Fprintf(&b, "  %-17s %s\n", shown, commands[n].summary)
	}
	fmt.Fprint(w, b.String())
}

// resolve maps the command line to a registered command and its arguments.
// help is true for a bare help request (list the commands).
func resolve(args []string) (name string, rest []string, help bool, err error) {
	name = "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	} else if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
		return "", nil, true, nil
	} else if len(args) > 0 && (args[0] == "--version" || args[0] == "-version") {
		name, args = "version", args[1:]
	}
	switch name {
	case "help":
		if len(args) == 0 {
			return "", nil, true, nil
		}
		// "specgate help serve" is "specgate serve --help".
		n, _, _, err := resolve(args)
		return n, []string{"--help"}, false, err
	case "bench":
		// "specgate bench X" is "specgate bench-X" (bench spec, bench decode, ...).
		if len(args) == 0 || strings.HasPrefix(args[0], "-") {
			if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
				return "", nil, true, nil
			}
			return "", nil, false, usageError("usage: specgate bench <spec|decode|engine|policy|gateway|cache|cache-http> [flags]")
		}
		name, args = "bench-"+args[0], args[1:]
		if name == "bench-cache" {
			name = "cache-bench"
		}
	}
	if _, ok := commands[name]; !ok {
		return "", nil, false, usageError(fmt.Sprintf("unknown command %q (specgate help lists them)", name))
	}
	return name, args, false, nil
}

func main() {
	name, args, help, err := resolve(os.Args[1:])
	if help {
		usage(os.Stdout)
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "specgate:", err)
		usage(os.Stderr)
		os.Exit(2)
	}
	if err := commands[name].run(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return // the flag set printed its usage; asking for help is not a failure
		}
		fmt.Fprintln(os.Stderr, "specgate:", err)
		var ue usageError
		if errors.As(err, &ue) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}
