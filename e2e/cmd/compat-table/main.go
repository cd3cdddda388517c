// Command compat-table prints the Markdown table of the e2e compatibility
// subset's runs, one `go test -json` output file per Karmada version, and
// exits 1 unless every version passed the whole subset. hack/compat.sh
// (`make compat`) runs it; see package compat.
//
//	compat-table [-md FILE] VERSION=FILE.json...
package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/compat"
)

func main() {
	md := flag.String("md", "", "also write the table to this file, with the date of the run")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: compat-table [-md FILE] VERSION=FILE.json...")
		os.Exit(2)
	}
	var runs []compat.Run
	for _, arg := range flag.Args() {
		version, path, ok := strings.Cut(arg, "=")
		if !ok {
			fmt.Fprintf(os.Stderr, "compat-table: %q is not VERSION=FILE\n", arg)
			os.Exit(2)
		}
		run, err := parseFile(version, path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "compat-table:", err)
			os.Exit(1)
		}
		runs = append(runs, run)
	}
	table := fmt.Sprintf("Karmada compatibility subset, %s\n\n%s", time.Now().UTC().Format("2006-01-02"), compat.Table(runs))
	fmt.Print(table)
	if *md != "" {
		if err := os.WriteFile(*md, []byte(table), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "compat-table:", err)
			os.Exit(1)
		}
	}
	if !compat.Supported(runs) {
		os.Exit(1)
	}
}

// parseFile parses one version's output; a missing file is a run that
// produced nothing (its Karmada did not build), reported in the table.
func parseFile(version, path string) (compat.Run, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return compat.Parse(version, strings.NewReader(""))
	}
	if err != nil {
		return compat.Run{}, err
	}
	defer f.Close()
	return compat.Parse(version, f)
}
