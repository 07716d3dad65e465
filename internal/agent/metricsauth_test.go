package agent

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/bmcfence/bmcfence/internal/kube/clientgo"
)

// fakeAuthAPI authenticates "good-token" (prometheus) and "other-token"
// (someone), and lets only prometheus get /metrics.
func fakeAuthAPI(calls *int) *fake.Clientset {
	c := fake.NewClientset()
	c.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		*calls++
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview)
		switch tr.Spec.Token {
		case "good-token":
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "system:serviceaccount:monitoring:prometheus"}}
		case "other-token":
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "someone"}}
		}
		return true, tr, nil
	})
	c.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		*calls++
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		nr := sar.Spec.NonResourceAttributes
		sar.Status.Allowed = sar.Spec.User == "system:serviceaccount:monitoring:prometheus" && nr != nil && nr.Path == "/metrics" && nr.Verb == "get"
		return true, sar, nil
	})
	return c
}

func TestMetricsAuth(t *testing.T) {
	tests := []struct {
		name   string
		header string
		want   int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"not a bearer token", "Basic YWRtaW46YWRtaW4=", http.StatusUnauthorized},
		{"unknown token", "Bearer made-up", http.StatusUnauthorized},
		{"authenticated, not authorized", "Bearer other-token", http.StatusForbidden},
		{"authorized", "Bearer good-token", http.StatusOK},
		// RFC 9110 §11.1: the scheme is case-insensitive.
		{"bearer in lower case", "bearer good-token", http.StatusOK},
		{"bearer in upper case", "BEARER good-token", http.StatusOK},
		{"spaces around the token", "Bearer   good-token ", http.StatusOK},
		{"bearer with no token", "Bearer ", http.StatusUnauthorized},
		{"a scheme that only starts like bearer", "Bearerx good-token", http.StatusUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var calls int
			auth := newKubeAuth(clientgo.Wrap(fakeAuthAPI(&calls)), clocktesting.NewFakeClock(time.Unix(0, 0)))
			h := auth.wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("metrics")) }))
			req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
			if tt.header != "" {
				req.Header.Set("Authorization", tt.header)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.want {
				t.Errorf("status %d, want %d (%s)", rec.Code, tt.want, rec.Body.String())
			}
		})
	}
}

// A decision is cached for a minute: Prometheus's scrapes do not each cost
// two API calls, and a revoked grant stops working within the minute.
func TestMetricsAuthCachesForAMinute(t *testing.T) {
	var calls int
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	auth := newKubeAuth(clientgo.Wrap(fakeAuthAPI(&calls)), clk)
	h := auth.wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	scrape := func() int {
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		req.Header.Set("Authorization", "Bearer good-token")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	for range 3 {
		if code := scrape(); code != http.StatusOK {
			t.Fatalf("status %d", code)
		}
	}
	if calls != 2 {
		t.Errorf("%d API calls for 3 scrapes within a minute, want 2 (one TokenReview, one SubjectAccessReview)", calls)
	}
	clk.Step(authCacheTTL)
	scrape()
	if calls != 4 {
		t.Errorf("%d API calls after the minute, want 4", calls)
	}
}

// The decision cache is keyed by a hash of the token, never the token: a
// heap dump or a debugger must not hand out Prometheus's credentials.
func TestMetricsAuthTokenCacheNeverHoldsTheToken(t *testing.T) {
	var calls int
	auth := newKubeAuth(clientgo.Wrap(fakeAuthAPI(&calls)), clocktesting.NewFakeClock(time.Unix(0, 0)))
	h := auth.wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, tok := range []string{"good-token", "other-token", "made-up"} {
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	auth.mu.Lock()
	defer auth.mu.Unlock()
	if len(auth.cache) != 3 {
		t.Fatalf("%d cached decisions, want 3", len(auth.cache))
	}
	for key := range auth.cache {
		for _, tok := range []string{"good-token", "other-token", "made-up"} {
			if strings.Contains(string(key[:]), tok) {
				t.Errorf("cache key %q holds the token %q", key, tok)
			}
		}
	}
}
