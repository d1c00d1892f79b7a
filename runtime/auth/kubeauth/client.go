package kubeauth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// The review client's bounds (spec/authentication.md, "Floods of bad tokens"): a replica
// never queues callers behind its reviews; it refuses at once what it cannot review now.
const (
	// DefaultReviewsInFlight is how many TokenReviews, and separately how many
	// SubjectAccessReviews, one replica has in flight at most (--auth-reviews-in-flight).
	// At the API server's usual few milliseconds a review, that is thousands a second,
	// beyond the client's rate limit; it bounds the goroutines and connections a flood
	// of cache misses can hold when the API server is slow.
	DefaultReviewsInFlight = 32
	// reviewQPS and reviewBurst are the client-side rate limit of reviews. Every new
	// caller and every cache expiry costs a review: client-go's default of 5 a second
	// would queue callers behind each other.
	reviewQPS   = 200
	reviewBurst = 2 * reviewQPS
	// maxThrottleWait is the longest a review waits for the rate limiter; one that
	// would wait longer is refused at once (503) rather than holding its caller.
	maxThrottleWait = 100 * time.Millisecond
)

// errReviewsBusy refuses a review that the replica cannot make now: inFlight reviews
// of its kind are in flight, or the rate limiter would make it wait too long.
var errReviewsBusy = errors.New("kubeauth: too many reviews in flight or per second")

// NewClient returns the Kubernetes client for New to review with, from the runtime's
// configuration: its requests are rate limited to 200 a second (bursts of 400), never
// wait more than 100 ms for that limit, and at most inFlight TokenReviews and inFlight
// SubjectAccessReviews are in flight at once (DefaultReviewsInFlight when inFlight <=
// 0). A review beyond either bound fails at once, which Authenticate and Allowed report
// as auth.ErrUnavailable (503, retryable).
func NewClient(config *rest.Config, inFlight int) (kubernetes.Interface, error) {
	if inFlight <= 0 {
		inFlight = DefaultReviewsInFlight
	}
	c := rest.CopyConfig(config)
	c.QPS, c.Burst = reviewQPS, reviewBurst
	c.RateLimiter = boundedWait{flowcontrol.NewTokenBucketRateLimiter(reviewQPS, reviewBurst)}
	slots := map[string]chan struct{}{
		"tokenreviews":         make(chan struct{}, inFlight),
		"subjectaccessreviews": make(chan struct{}, inFlight),
	}
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &reviewSlots{next: rt, slots: slots} })
	client, err := kubernetes.NewForConfig(c)
	if err != nil {
		return nil, fmt.Errorf("kubeauth: review client: %w", err)
	}
	return client, nil
}

// boundedWait is a rate limiter whose Wait gives up at once when a token would take
// longer than maxThrottleWait to come.
type boundedWait struct {
	flowcontrol.RateLimiter
}

func (b boundedWait) Wait(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, maxThrottleWait)
	defer cancel()
	// The token bucket refuses at once, taking nothing, a wait that would pass the
	// deadline.
	if err := b.RateLimiter.Wait(ctx); err != nil {
		return fmt.Errorf("%w: %w", errReviewsBusy, err)
	}
	return nil
}

// reviewSlots is the review client's transport: it lets a review through only while
// fewer than the capacity of its kind's slots are in flight, and refuses it at once
// otherwise. Requests of other resources pass freely.
type reviewSlots struct {
	next  http.RoundTripper
	slots map[string]chan struct{} // by resource: the last element of the path
}

func (s *reviewSlots) RoundTrip(req *http.Request) (*http.Response, error) {
	slots := s.slots[path.Base(req.URL.Path)]
	if slots == nil {
		return s.next.RoundTrip(req)
	}
	select {
	case slots <- struct{}{}:
	default:
		if req.Body != nil {
			_ = req.Body.Close() // a RoundTripper closes the body, even when it fails
		}
		return nil, errReviewsBusy
	}
	// The slot is free again once the answer's head has arrived: the small body that
	// follows is read at once.
	defer func() { <-slots }()
	return s.next.RoundTrip(req)
}
