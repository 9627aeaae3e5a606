package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/specgate/specgate/gateway"
)

func init() {
	register("version", "print the version, commit and Go version (--json for JSON); also GET /version", runVersion)
}

func runVersion(args []string) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON (the same object as GET /version)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError("version: takes no arguments")
	}
	v := gateway.BuildVersion()
	if *asJSON {
		return json.NewEncoder(os.Stdout).Encode(v)
	}
	fmt.Println(v.String())
	return nil
}
