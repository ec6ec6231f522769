package fleet

import (
	trainerv1alpha1 "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	lwsv1 "sigs.k8s.io/lws/api/leaderworkerset/v1"

	trainyardv1alpha1 "github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// Scheme knows every kind the harness and trainyard's tests touch.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(apiextv1.AddToScheme(s))
	utilruntime.Must(kueuev1beta2.AddToScheme(s))
	utilruntime.Must(jobsetv1alpha2.AddToScheme(s))
	utilruntime.Must(lwsv1.AddToScheme(s))
	utilruntime.Must(trainerv1alpha1.AddToScheme(s))
	utilruntime.Must(trainyardv1alpha1.AddToScheme(s))
	return s
}
