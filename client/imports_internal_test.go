package client

import (
	"go/build"
	"strings"
	"testing"
)

// The SDK depends only on the public API package, as its package comment
// and the README promise: a program that uses it needs nothing under
// internal/, which its module could not import anyway.
func TestImportsNoInternal(t *testing.T) {
	t.Parallel()
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports { // not the tests'
		if strings.HasPrefix(imp, "github.com/harbinger-mq/harbinger/") && !strings.HasPrefix(imp, "github.com/harbinger-mq/harbinger/api/") {
			t.Errorf("client imports %s", imp)
		}
	}
}
