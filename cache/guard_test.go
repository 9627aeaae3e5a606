package cache_test

import (
	"testing"

	"github.com/specgate/specgate/cache"
)

func TestGuard(t *testing.T) {
	cases := []struct{ q, cached, want string }{
		{"How do I reverse a list in Python?", "How can I reverse a Python list?", ""},
		{"how do i reverse a list in python", "How do I reverse a list in Python?", ""},
		{"Is it safe to eat raw eggs?", "Is it not safe to eat raw eggs?", cache.GuardNegation},
		{"Why doesn't my code compile?", "Why does my code compile?", cache.GuardNegation},
		{"Can I bake bread without yeast?", "Can I bake bread with yeast?", cache.GuardNegation},
		{"What is 15% of 80?", "What is 20% of 80?", cache.GuardNumber},
		{"What is seven times eight?", "What is 7 times 8?", ""},
		{"What is seven times eight?", "What is 7 times 9?", cache.GuardNumber},
		{"Who ruled in the 12th century?", "Who ruled in the 14th century?", cache.GuardNumber},
		{"What is the weather in Paris in January?", "What is the weather in Paris in July?", cache.GuardDate},
		{"May I park here on Monday?", "May I park here on Monday?", ""},
		{"What is the capital of Austria?", "What is the capital of Australia?", cache.GuardEntity},
		{"How many African countries are there?", "How many countries are there in Africa?", ""},
		{"Who was the first US president?", "Who was the first president of the United States?", ""},
		{"Does Alice owe Bob money?", "Does Bob owe Alice money?", cache.GuardRole},
		{"How do I convert Celsius to Fahrenheit?", "How do I convert Fahrenheit to Celsius?", cache.GuardRole},
		{"What is the difference between TCP and UDP?", "What is the difference between UDP and TCP?", ""},
		{"Can a dog live with a cat if the dog is older than the cat?", "Can a dog live with a cat if the cat is older than the dog?", cache.GuardRole},
		{"How do I sort a list in ascending order?", "How do I sort a list in descending order?", cache.GuardAntonym},
		{"Which is the hottest city in Europe?", "Which is the coldest city in Europe?", cache.GuardAntonym},
		{"How do I cook rice on the stove?", "How do I cook quinoa on the stove?", cache.GuardSubstitution},
		{"How deep is the lake?", "Where is the lake?", cache.GuardQuestion},
		{"How do I tie a tie?", "How do I tie a bow tie?", cache.GuardModifier},
	}
	for _, c := range cases {
		if got := cache.Guard(c.q, c.cached); got != c.want {
			t.Errorf("Guard(%q, %q) = %q, want %q", c.q, c.cached, got, c.want)
		}
	}
}

func TestNormalize(t *testing.T) {
	cases := []struct {
		in   string
		fold bool
		want string
	}{
		{"  Hello\t\n  World  ", false, "Hello World"},
		{"Ｆｕｌｌｗｉｄｔｈ", false, "Fullwidth"}, // NFKC
		{"ÉCOLE", true, "école"},
		{"e\u0301", false, "é"}, // composed
	}
	for _, c := range cases {
		if got := cache.Normalize(c.in, c.fold); got != c.want {
			t.Errorf("Normalize(%q, %v) = %q, want %q", c.in, c.fold, got, c.want)
		}
	}
}

func TestLexicalEmbedder(t *testing.T) {
	e, err := cache.NewLexical(512)
	if err != nil {
		t.Fatal(err)
	}
	vs, err := e.Embed(t.Context(), []string{"How do I reverse a list?", "how do i reverse a list", "What is the capital of France?", ""})
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vs[:3] {
		if n := cache.Dot(v, v); n < 0.999 || n > 1.001 {
			t.Errorf("vector %d norm² = %v, want 1", i, n)
		}
	}
	if s := cache.Dot(vs[0], vs[1]); s < 0.95 {
		t.Errorf("case/punctuation variants: cosine %v < 0.95", s)
	}
	if s := cache.Dot(vs[0], vs[2]); s > 0.3 {
		t.Errorf("unrelated questions: cosine %v > 0.3", s)
	}
	if cache.Dot(vs[3], vs[3]) != 0 {
		t.Error("empty text should embed to the zero vector")
	}
	again, _ := e.Embed(t.Context(), []string{"How do I reverse a list?"})
	for i := range again[0] {
		if again[0][i] != vs[0][i] {
			t.Fatal("embedding is not deterministic")
		}
	}
	if _, err := cache.NewLexical(8); err == nil {
		t.Error("dim 8 accepted")
	}
}
