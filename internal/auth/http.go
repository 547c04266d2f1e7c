package auth

import (
	"net/http"
	"strings"
)

// CookieName is the cookie the dashboard keeps a signed-in token in.
const CookieName = "harbinger_token"

// HTTPToken is the token an HTTP request carries: "Authorization: Bearer
// TOKEN" (tools, Prometheus) or the dashboard's cookie (a browser).
func HTTPToken(r *http.Request) string {
	if h := r.Header.Get("Authorization"); h != "" {
		if tok, ok := strings.CutPrefix(h, "Bearer "); ok {
			return strings.TrimSpace(tok)
		}
		return ""
	}
	if c, err := r.Cookie(CookieName); err == nil {
		return c.Value
	}
	return ""
}
