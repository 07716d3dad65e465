package agent

import (
	"context"
	"crypto/sha256"
	"net/http"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/bmcfence/bmcfence/internal/kube"
	"github.com/bmcfence/bmcfence/internal/mutant"
)

// Decisions are cached per token for a minute: Prometheus scrapes every
// 15-60 s, and two API calls per scrape would cost more than the scrape. A
// revoked grant stops working within the minute. The cache is bounded so a
// flood of made-up tokens cannot grow it.
const (
	authCacheTTL  = time.Minute
	authCacheSize = 1024
	authTimeout   = 10 * time.Second
)

// kubeAuth guards a handler the way kube-rbac-proxy does, in-process: the
// bearer token must be one the API server authenticates (TokenReview), and
// its user must be allowed to `get` the request's non-resource URL
// (SubjectAccessReview), e.g. a ClusterRole with nonResourceURLs
// ["/metrics"] and verbs ["get"].
type kubeAuth struct {
	client kube.Interface
	clock  clock.PassiveClock

	mu    sync.Mutex
	cache map[cacheKey]authDecision
}

type authDecision struct {
	status  int // http.StatusOK, StatusUnauthorized or StatusForbidden
	expires time.Time
}

func newKubeAuth(client kube.Interface, clk clock.PassiveClock) *kubeAuth {
	return &kubeAuth{client: client, clock: clk, cache: map[cacheKey]authDecision{}}
}

func (k *kubeAuth) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := bearerToken(r.Header.Get("Authorization"))
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="bmcfence metrics"`)
			http.Error(w, "Unauthorized: a bearer token is required", http.StatusUnauthorized)
			return
		}
		switch status := k.decide(r.Context(), token, r.URL.Path); status {
		case http.StatusOK:
			next.ServeHTTP(w, r)
		case http.StatusUnauthorized:
			http.Error(w, "Unauthorized", status)
		case http.StatusForbidden:
			http.Error(w, "Forbidden: the token's user may not get "+r.URL.Path, status)
		default:
			http.Error(w, "cannot check the token with the API server", status)
		}
	})
}

// bearerToken reads an Authorization header's bearer token. The scheme is
// case-insensitive (RFC 9110 §11.1): "bearer" and "BEARER" are Bearer.
func bearerToken(h string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(h), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false
	}
	return token, true
}

// cacheKey keys a decision by a hash of the token (and the path), never by
// the token itself: a heap dump or a debugger must not hand out the
// scraper's credentials.
type cacheKey [sha256.Size]byte

func keyOf(token, path string) cacheKey {
	if mutant.On(mutant.MetricsTokenHash) {
		// The mutant: the token itself, as before issue 17.
		var k cacheKey
		copy(k[:], path+"\x00"+token)
		return k
	}
	return sha256.Sum256([]byte(path + "\x00" + token))
}

func (k *kubeAuth) decide(ctx context.Context, token, path string) int {
	key := keyOf(token, path)
	now := k.clock.Now()
	k.mu.Lock()
	if d, ok := k.cache[key]; ok && now.Before(d.expires) {
		k.mu.Unlock()
		return d.status
	}
	k.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, authTimeout)
	defer cancel()
	status := k.review(ctx, token, path)
	if status == http.StatusServiceUnavailable {
		return status // an API hiccup is not a decision: ask again next time
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.cache) >= authCacheSize {
		for key, d := range k.cache {
			if !now.Before(d.expires) {
				delete(k.cache, key)
			}
		}
		if len(k.cache) >= authCacheSize {
			k.cache = map[cacheKey]authDecision{}
		}
	}
	k.cache[key] = authDecision{status: status, expires: now.Add(authCacheTTL)}
	return status
}

func (k *kubeAuth) review(ctx context.Context, token, path string) int {
	tr, err := k.client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token},
	}, metav1.CreateOptions{})
	if err != nil {
		return http.StatusServiceUnavailable
	}
	if !tr.Status.Authenticated {
		return http.StatusUnauthorized
	}
	u := tr.Status.User
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar, err := k.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User: u.Username, Groups: u.Groups, UID: u.UID, Extra: extra,
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: "get"},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return http.StatusServiceUnavailable
	}
	if !sar.Status.Allowed {
		return http.StatusForbidden
	}
	return http.StatusOK
}
