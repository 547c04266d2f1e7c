package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/harbinger-mq/harbinger/internal/auth"
)

func init() {
	register("token", "make a token for the broker's token file (-tokens): prints the token and its file entry", runToken)
}

func runToken(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("token", "token -name NAME -scope PERM[:PREFIX] [-scope ...]   (PERM: read, publish, consume or admin)", stderr)
	name := fs.String("name", "", "who or what the token is for; shown in the broker's log and the dashboard (required)")
	var scopes []auth.Scope
	fs.Func("scope", `what the token may do, repeatable: "admin" (everything), "publish:orders." (publish to queues whose names start with orders.), "read", "consume:jobs"`, func(v string) error {
		s, err := auth.ParseScope(v)
		if err != nil {
			return err
		}
		scopes = append(scopes, s)
		return nil
	})
	if err := parse(fs, args); err != nil {
		return err
	}
	if strings.TrimSpace(*name) == "" || len(scopes) == 0 {
		fmt.Fprintln(stderr, "harbinger token needs -name and at least one -scope")
		fs.Usage()
		return errUsage
	}
	if err := auth.CheckName(*name); err != nil {
		return fmt.Errorf("-name: %w", err)
	}
	tok, err := auth.NewToken()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "token (give it to %s; it is not stored anywhere):\n\n  %s\n\n", *name, tok)
	fmt.Fprintf(stdout, "entry for the token file (under \"tokens:\"; then send the broker SIGHUP):\n\n%s", auth.FileEntry(*name, tok, scopes))
	return nil
}
