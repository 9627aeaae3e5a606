package cache

import (
	"fmt"
	"math/rand/v2"
)

// Benchmark questions: `specgate bench cache-http` fills the cache with
// them, and the HNSW recall test and search benchmarks index their lexical
// embeddings, so the parameters chosen there are measured on the data the
// HTTP benchmark serves.
//
// Question parts. A stored question is template.stored filled with (verb,
// object, language); its paraphrase is template.para filled with the same
// three: lower case, no question mark, a few function words changed — what a
// user retyping the question would send. Every verb, object and language
// appears in both, so the guard's substitution, entity and question-type
// rules accept the pair, while stored questions differ from each other in
// at least one content word (and are rejected against each other).
var (
	benchVerbs = []string{
		"reverse", "sort", "copy", "merge", "filter", "shuffle", "flatten", "serialize", "parse", "validate",
		"compress", "encrypt", "hash", "cache", "log", "profile", "benchmark", "debug", "test", "format",
		"print", "iterate over", "deduplicate", "paginate", "stream", "mock", "clone", "truncate", "pad", "rotate",
		"transpose", "normalize", "tokenize", "escape", "encode", "index", "search", "group", "chunk", "zip",
	}
	benchObjects = []string{
		"a list", "a dictionary", "a string", "a JSON file", "a CSV file", "a linked list", "a binary tree", "a hash map",
		"a byte array", "a date string", "a config file", "an HTTP response", "a database query", "a log file", "an image",
		"a matrix", "a queue", "a stack", "a set of integers", "a tuple", "a struct", "a nested object", "a text file",
		"a regular expression match", "a URL", "a timestamp", "a UUID", "a zip archive", "a YAML file", "an XML document",
		"a socket buffer", "a thread pool result", "a web form", "a SQL table", "an environment variable", "a command line argument",
		"a sparse vector", "a priority queue", "a bitmap", "a Unicode string", "a directory tree", "a protobuf message",
		"an event stream", "a graph", "a heap", "a time series", "a spreadsheet", "a PDF file", "a markdown document", "a cookie",
	}
	benchLangs = []string{
		"Python", "Go", "Rust", "Java", "JavaScript", "TypeScript", "Ruby", "PHP", "Kotlin", "Swift",
		"Scala", "Haskell", "Elixir", "Lua", "Perl", "Julia", "Dart", "Bash", "PowerShell", "Clojure",
		"OCaml", "Erlang", "Zig", "Nim", "Crystal", "Fortran", "COBOL", "Groovy", "Racket", "Prolog",
	}
	benchTemplates = []struct{ stored, para string }{
		{"How do I %s %s in %s?", "how can i %s %s in %s"},
		{"What is the best way to %s %s in %s?", "what is the best way to %s %s in %s please"},
		{"How can I %s %s using %s?", "how do i %s %s using %s"},
		{"In %[3]s, how do you %[1]s %[2]s?", "in %[3]s how would you %[1]s %[2]s"},
		{"What's the simplest way to %s %s in %s?", "what is the simplest way to %s %s in %s"},
		{"How would I %s %s with %s?", "how should i %s %s with %s"},
		{"Can you show me how to %s %s in %s?", "can you show me how to %s %s in %s please"},
		{"Is there a built-in way to %s %s in %s?", "is there a built-in way to %s %s in %s"},
		{"Explain how to %s %s in %s.", "please explain how to %s %s in %s"},
		{"What is the idiomatic way to %s %s in %s?", "what's the idiomatic way to %s %s in %s"},
	}
)

// BenchQuestion is the i-th of the len(templates)×len(verbs)×len(objects)×len(langs)
// combinations: stored text, paraphrase, and the (verb, object, language) it asks about.
func BenchQuestion(i int) (stored, para string, parts [3]string) {
	l := i % len(benchLangs)
	i /= len(benchLangs)
	o := i % len(benchObjects)
	i /= len(benchObjects)
	v := i % len(benchVerbs)
	i /= len(benchVerbs)
	t := benchTemplates[i%len(benchTemplates)]
	parts = [3]string{benchVerbs[v], benchObjects[o], benchLangs[l]}
	return fmt.Sprintf(t.stored, parts[0], parts[1], parts[2]), fmt.Sprintf(t.para, parts[0], parts[1], parts[2]), parts
}

// BenchQuestionSpace is the number of distinct questions BenchQuestion can make.
var BenchQuestionSpace = len(benchTemplates) * len(benchVerbs) * len(benchObjects) * len(benchLangs)

// BenchQuestionPick returns n distinct question indices in [0, BenchQuestionSpace), deterministic
// for a seed.
func BenchQuestionPick(n int, seed uint64) []int {
	r := rand.New(rand.NewPCG(seed, 0xcafe))
	perm := r.Perm(BenchQuestionSpace)
	return perm[:n]
}
