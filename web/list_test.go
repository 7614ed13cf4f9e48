package web

import (
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/warrenmq/warren/broker"
)

// TestListOfBuildsOnlyThePage: a paged list turns only the objects of its
// page into JSON, and answers exactly what writeList answers over every
// object's JSON (filter, regex, sort, reverse, columns, page errors).
func TestListOfBuildsOnlyThePage(t *testing.T) {
	var qs []broker.QueueInfo
	for i := range 230 {
		qs = append(qs, broker.QueueInfo{Name: fmt.Sprintf("q%03d", (i*37)%230), VHost: []string{"/", "v"}[i%2],
			Ready: (i * 7) % 11, Unacked: i % 3, Consumers: i % 4})
	}
	toJSON := func(q broker.QueueInfo) item {
		return item{"name": q.Name, "vhost": q.VHost, "messages": q.Ready + q.Unacked, "messages_ready": q.Ready,
			"messages_unacknowledged": q.Unacked, "consumers": q.Consumers, "other": len(q.Name)}
	}
	for _, query := range []string{
		"page=1&page_size=50",
		"page=3&page_size=20&name=q1&sort=name",
		"page=2&page_size=10&sort=messages&sort_reverse=true",
		"page=1&page_size=7&sort=consumers&columns=name,consumers",
		"page=2&page_size=5&name=^q0[0-4]&use_regex=true&sort=vhost",
		"page=1&page_size=5&sort=messages_ready",
		"page=1&page_size=5&sort=messages_unacknowledged&sort_reverse=true",
		"page=4&page_size=9&sort=other",
		"page=99&page_size=10",
		"page=0",
		"page=1&page_size=501",
		"name=q00",
		"sort=name&sort_reverse=true&columns=name",
	} {
		built := 0
		count := func(q broker.QueueInfo) item { built++; return toJSON(q) }
		got := httptest.NewRecorder()
		writeListOf(got, httptest.NewRequest("GET", "/api/queues?"+query, nil), append([]broker.QueueInfo(nil), qs...),
			func(q broker.QueueInfo) string { return q.Name }, queueSorts, count)

		items := make([]item, len(qs))
		for i, q := range qs {
			items[i] = toJSON(q)
		}
		want := httptest.NewRecorder()
		writeList(want, httptest.NewRequest("GET", "/api/queues?"+query, nil), items)
		if got.Code != want.Code || got.Body.String() != want.Body.String() {
			t.Errorf("%s:\n got %d %s\nwant %d %s", query, got.Code, got.Body, want.Code, want.Body)
		}
		lq, _ := parseListQuery(httptest.NewRecorder(), httptest.NewRequest("GET", "/api/queues?"+query, nil))
		if _, sortable := queueSorts[lq.sortKey]; lq.paged && (lq.sortKey == "" || sortable) && built > lq.size {
			t.Errorf("%s: built the JSON of %d queues for a page of %d", query, built, lq.size)
		}
	}
}
