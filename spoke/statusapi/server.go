// Package statusapi is the agent's side of Trainer's TrainJob status API:
// the endpoint a job's processes post their progress to (same path, body
// and answers as Trainer v2.3's pkg/statusserver), the credentials that say
// which job attempt a request speaks for, and the store of validated
// reports the agent carries to the hub on the Dispatch.
package statusapi

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"github.com/kubeflow/trainer/v2/pkg/statusserver"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// Caller is the Dispatch attempt a request's credential speaks for.
type Caller struct {
	Dispatch types.UID
	Attempt  int32
}

// Authenticator tells which Dispatch attempt a bearer token speaks for. It
// returns ErrBadToken for a token it does not accept; namespace and name
// are the hub TrainJob's, from the request's path.
type Authenticator interface {
	Authenticate(ctx context.Context, token, namespace, name string) (Caller, error)
}

// Dispatches finds one of the agent's Dispatches by UID (nil: none).
type Dispatches interface {
	ByUID(ctx context.Context, uid types.UID) (*v1alpha1.Dispatch, error)
}

// Server answers Trainer's status endpoint for the Dispatches of one
// target and keeps each accepted report in Reports.
type Server struct {
	Target     string
	Auth       Authenticator
	Dispatches Dispatches
	Reports    *Reports
	Log        logr.Logger
	// Clock times each job's report budget (default: real clock).
	Clock clock.PassiveClock
}

// Handler routes Trainer's status path; every other request gets 404.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+statusserver.StatusUrl("{namespace}", "{name}"), s.report)
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		answer(w, http.StatusNotFound, metav1.StatusReasonNotFound, "Not found")
	})
	return mux
}

func (s *Server) report(w http.ResponseWriter, r *http.Request) {
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	log := s.Log.WithValues("namespace", ns, "trainJob", name)
	if r.ContentLength > MaxBodyBytes {
		answer(w, http.StatusRequestEntityTooLarge, metav1.StatusReasonRequestEntityTooLarge, "Payload too large")
		return
	}
	d, code := s.authorize(r.Context(), r.Header.Get("Authorization"), ns, name)
	if code != http.StatusOK {
		log.V(2).Info("status report refused", "code", code)
		answerCode(w, code)
		return
	}
	if ok, wait := s.Reports.Allow(d.UID, s.now()); !ok {
		tooMany(w, wait, "Too many status reports for this TrainJob")
		return
	}
	var req trainer.UpdateTrainJobStatusRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxBodyBytes)).Decode(&req); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			answer(w, http.StatusRequestEntityTooLarge, metav1.StatusReasonRequestEntityTooLarge, "Payload too large")
			return
		}
		answer(w, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, "Invalid payload")
		return
	}
	if err := Validate(req.TrainerStatus); err != nil {
		answer(w, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, err.Error())
		return
	}
	if req.TrainerStatus != nil {
		s.Reports.Put(d.UID, req.TrainerStatus)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(req)
}

// authorize finds the Dispatch the request's credential speaks for and
// checks the request names that Dispatch's hub TrainJob and its current
// attempt. It answers 403 for any credential that does not, 404 when its
// Dispatch is gone.
func (s *Server) authorize(ctx context.Context, header, ns, name string) (*v1alpha1.Dispatch, int) {
	token := bearer(header)
	if token == "" {
		return nil, http.StatusForbidden
	}
	caller, err := s.Auth.Authenticate(ctx, token, ns, name)
	if errors.Is(err, ErrBadToken) {
		return nil, http.StatusForbidden
	}
	if errors.Is(err, ErrBusy) {
		return nil, http.StatusTooManyRequests
	}
	if err != nil {
		s.Log.Error(err, "authenticating a status report")
		return nil, http.StatusInternalServerError
	}
	d, err := s.Dispatches.ByUID(ctx, caller.Dispatch)
	if err != nil {
		s.Log.Error(err, "finding the Dispatch of a status report")
		return nil, http.StatusInternalServerError
	}
	if d == nil || !d.DeletionTimestamp.IsZero() {
		return nil, http.StatusNotFound
	}
	if d.Spec.TargetName != s.Target || d.Spec.Attempt != caller.Attempt ||
		d.Spec.Workload.Namespace != ns || d.Spec.TrainJob.Name != name {
		return nil, http.StatusForbidden
	}
	return d, http.StatusOK
}

// bearer returns the credential of an RFC 7235 "Bearer" Authorization
// header, or "".
func bearer(header string) string {
	parts := strings.Fields(header)
	if len(parts) != 2 || !strings.EqualFold(parts[0], "Bearer") {
		return ""
	}
	return parts[1]
}

func answerCode(w http.ResponseWriter, code int) {
	switch code {
	case http.StatusForbidden:
		answer(w, code, metav1.StatusReasonForbidden, "Forbidden")
	case http.StatusNotFound:
		answer(w, code, metav1.StatusReasonNotFound, "Train job not found")
	case http.StatusTooManyRequests:
		tooMany(w, time.Second, "Too many status reports to check")
	default:
		answer(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, "Internal error")
	}
}

func (s *Server) now() time.Time {
	if s.Clock == nil {
		return time.Now()
	}
	return s.Clock.Now()
}

// tooMany answers a report over its job's budget as the Kubernetes API
// server answers a client over its limits: 429, Retry-After in whole
// seconds (at least 1), and a metav1.Status saying the same.
func tooMany(w http.ResponseWriter, wait time.Duration, msg string) {
	secs := max(int32(math.Ceil(wait.Seconds())), 1)
	w.Header().Set("Retry-After", strconv.Itoa(int(secs)))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusTooManyRequests)
	_ = json.NewEncoder(w).Encode(metav1.Status{Status: metav1.StatusFailure, Message: msg,
		Reason: metav1.StatusReasonTooManyRequests, Code: http.StatusTooManyRequests, Details: &metav1.StatusDetails{RetryAfterSeconds: secs}})
}

// answer writes a failure as Trainer's server does: a metav1.Status.
func answer(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(metav1.Status{Status: metav1.StatusFailure, Message: msg, Reason: reason, Code: int32(code)})
}
