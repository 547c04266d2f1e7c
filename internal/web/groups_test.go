package web

import (
	"strings"
	"testing"

	"github.com/harbinger-mq/harbinger/internal/broker"
	"github.com/harbinger-mq/harbinger/internal/fair"
)

// A queue with fair shares and a limit per tenant shows each group's
// running jobs against the limit, its waiting jobs and its throttled ones,
// on its page and in the read API; a tenant name is shown as text.
func TestQueuePageShowsGroups(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	if _, err := tb.b.Declare("reports", broker.QueueConfig{GroupBy: "tenant", Limits: broker.Rules{"tenant=1"}}); err != nil {
		t.Fatal(err)
	}
	for _, tn := range []string{"<b>acme</b>", "<b>acme</b>", "globex"} {
		tb.publish(t, &broker.Message{Queue: "reports", Producer: "p", JobType: "pdf", Headers: map[string]string{fair.TenantHeader: tn}})
	}
	c, err := tb.b.Subscribe("reports", "w", 3)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 2 {
		if _, err := c.Next(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	code, page, _ := tb.do(t, "GET", "/queues/reports", "", "", "")
	if code != 200 {
		t.Fatalf("GET /queues/reports: %d", code)
	}
	groups := element(t, page, `<table class="grid" id="groups">`, "</table>")
	if strings.Contains(groups, "<b>acme") || !strings.Contains(groups, "&lt;b&gt;acme&lt;/b&gt;") {
		t.Fatalf("the tenant name is not escaped:\n%s", groups)
	}
	if !strings.Contains(groups, `<td class="num">1/1</td><td class="num">1</td>`) {
		t.Fatalf("acme's row lacks 1/1 running and 1 waiting:\n%s", groups)
	}
	if got := element(t, page, `<td id="limits">`, "</td>"); got != "tenant=1" {
		t.Fatalf("limits shown as %q", got)
	}
	if got := element(t, page, `<td id="reserve">`, "</td>"); got != "the last 2 workers, against jobs 4x the other groups' mean, window 1 s" {
		t.Fatalf("reservation shown as %q", got)
	}
	if got := element(t, page, `<td id="credit">`, "</td>"); got != "200 ms" {
		t.Fatalf("credit shown as %q", got)
	}
	var qv QueueView
	getJSON(t, tb, "/api/v1/queues/reports", &qv)
	if len(qv.Groups) != 2 || qv.GroupCount != 2 || qv.Groups[0].Limit != 1 || qv.Groups[0].Waiting != 1 || qv.Config.GroupBy != "tenant" ||
		qv.Config.Reserve != fair.DefaultReserve || qv.Config.ReserveAbove != fair.DefaultReserveAbove || qv.Config.CreditMS != 200 {
		t.Fatalf("read API: %+v", qv)
	}
}
