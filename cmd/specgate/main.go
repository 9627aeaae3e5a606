// Command specgate is the one binary: an OpenAI-compatible LLM gateway with a
// semantic cache and a local speculative-decoding engine.
//
// Usage: specgate [serve|generate|bench|config] [flags]; serve is the default.
package main

import (
	"errors"
	"flag"
	"fmt"
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

func usage() {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("usage: specgate <command> [flags]  (default: serve)\n\ncommands:\n")
	for _, n := range names {
		fmt.Fprintf(&b, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprint(os.Stderr, b.String())
}

func main() {
	args := os.Args[1:]
	name := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	// "specgate bench X" is "specgate bench-X" (bench spec, bench decode, ...).
	if name == "bench" {
		if len(args) == 0 || strings.HasPrefix(args[0], "-") {
			fmt.Fprintln(os.Stderr, "usage: specgate bench <spec|decode|engine|policy|gateway|cache|cache-http> [flags]")
			usage()
			os.Exit(2)
		}
		name, args = "bench-"+args[0], args[1:]
		if name == "bench-cache" {
			name = "cache-bench"
		}
	}
	if name == "help" || name == "-h" {
		usage()
		return
	}
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "specgate: unknown command %q\n", name)
		usage()
		os.Exit(2)
	}
	if err := cmd.run(args); err != nil {
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
