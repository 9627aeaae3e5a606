// Command medusaquant writes a Medusa or Hydra heads directory with int8 weights
// (per-row F32 scales; medusa.QuantizeInt8), optionally cutting FR-Spec
// projections to the -rows most frequent tokens:
//
//	go run ./tools/medusaquant -in DIR -out DIR [-rows 1024]
//
// The result loads with medusa.Load like any heads directory (on the CPU
// the heads run on the int8 weight-only kernels with the per-row scales;
// the CUDA path uploads the dequantized weights as fp16); the file is
// about half the size of fp16.
package main

import (
	"flag"
	"fmt"
	"log"

	"github.com/specgate/specgate/medusa"
)

func main() {
	in := flag.String("in", "", "heads directory to read")
	out := flag.String("out", "", "directory to write")
	rows := flag.Int("rows", 0, "cut FR-Spec projections to this many most frequent tokens (0: keep)")
	flag.Parse()
	if *in == "" || *out == "" {
		log.Fatal("medusaquant: -in and -out are required")
	}
	worst, err := medusa.QuantizeInt8(*in, *out, *rows)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("wrote %s: largest |int8 - original| = %.4f of its row's max |w|\n", *out, worst)
}
