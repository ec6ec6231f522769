package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueuetesting "sigs.k8s.io/kueue/pkg/util/testing/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/cmd/trainyard/dashboard"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// chromium finds the browser: $TRAINYARD_CHROMIUM, else Debian's chromium
// (.ci/run installs it) or Chrome on PATH.
func chromium(t *testing.T) string {
	if p := os.Getenv("TRAINYARD_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no chromium on PATH: install it with `apt-get install -y chromium` (.ci/run does) or set TRAINYARD_CHROMIUM")
	return ""
}

// syncBuffer is the command's output, read while it runs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var servingOn = regexp.MustCompile(`on (http://127\.0\.0\.1:\d+/)`)

// startDashboard runs `trainyard dashboard --port 0 --kubeconfig ...` until
// the test ends and returns its address.
func startDashboard(t *testing.T, g Gomega) string {
	ctx, cancel := context.WithCancel(context.Background())
	cmd := dashboard.NewCommand("trainyard")
	out := &syncBuffer{}
	cmd.SetOut(out)
	cmd.SetErr(out)
	cmd.SetArgs([]string{"--port", "0", "--kubeconfig", hub.Kubeconfig})
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("dashboard: %v", err)
		}
	})
	var url string
	g.Eventually(func() string {
		if m := servingOn.FindStringSubmatch(out.String()); m != nil {
			url = m[1]
		}
		return url
	}, 10*time.Second, 50*time.Millisecond).ShouldNot(BeEmpty(), "the dashboard says where it listens; it printed %q", out)
	return url
}

// seedQuota adds a cohort of two ClusterQueues with usage for the quota
// view (the CLI's tests do not read ClusterQueues).
func seedQuota(t *testing.T) {
	ctx := context.Background()
	for _, q := range []struct {
		name, nominal, used, borrowed string
	}{{"cq-team-a", "16", "8", "0"}, {"cq-team-b", "8", "12", "4"}} {
		cq := kueuetesting.MakeClusterQueue(q.name).Cohort("research").
			ResourceGroup(*kueuetesting.MakeFlavorQuotas(gpuFlavor).Resource(v1alpha1.GPUResource, q.nominal).Obj()).Obj()
		if err := hub.Client.Create(ctx, cq); apierrors.IsAlreadyExists(err) {
			continue
		} else if err != nil {
			t.Fatal(err)
		}
		usage := []kueue.FlavorUsage{{Name: gpuFlavor, Resources: []kueue.ResourceUsage{{
			Name: v1alpha1.GPUResource, Total: resource.MustParse(q.used), Borrowed: resource.MustParse(q.borrowed)}}}}
		cq.Status.FlavorsUsage, cq.Status.FlavorsReservation, cq.Status.AdmittedWorkloads = usage, usage, 1
		if err := hub.Client.Status().Update(ctx, cq); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDashboardInChromium loads the dashboard in headless Chromium against
// the seeded hub: the fleet map shows the targets and llama running on
// spoke-1 in rack-a with its progress bar, a target added later appears
// without a reload, the job page shows the placement, the progress bar and
// the metric curves, and screenshots of the fleet and job pages are kept.
func TestDashboardInChromium(t *testing.T) {
	exe := chromium(t)
	g := NewWithT(t)
	seedQuota(t)
	url := startDashboard(t, g)

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 1000),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	ctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	defer cancel()

	g.Expect(chromedp.Do(ctx,
		chromedp.Navigate(url),
		chromedp.WaitVisible(chromedp.CSS(`#fleet-map article[data-target="spoke-1"] svg.map`)),
	)).To(Succeed(), "load the fleet map")
	const targetsJS = `Array.from(document.querySelectorAll('#fleet-map article.target')).map(a => a.dataset.target)`
	targets, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](targetsJS))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(targets).To(Equal([]string{"hpc", "spoke-1"}), "targets on the fleet map")
	llamaOn, err := chromedp.Run(ctx, chromedp.Evaluate[string](
		`document.querySelector('#fleet-map li[data-job="team-a/llama"]')?.closest('article.target')?.dataset.target ?? ""`))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(llamaOn).To(Equal("spoke-1"), "the target llama is drawn on")
	for domain, want := range map[string]string{"rack-a": "1", "rack-b": "0"} {
		jobs, err := chromedp.Run(ctx, chromedp.AttributeValue(
			chromedp.CSS(`article[data-target="spoke-1"] g.domain[data-domain="`+domain+`"]`), "data-jobs"))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(jobs.Value).To(Equal(want), "jobs drawn in %s", domain)
	}
	// llama's progress on the fleet map: a bar filled to its 42%.
	fleetBar, err := chromedp.Run(ctx, chromedp.Evaluate[string](
		`document.querySelector('#fleet-map li[data-job="team-a/llama"] svg.bar.progress rect.used')?.getAttribute('width') ?? ""`))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fleetBar).To(Equal("42"), "llama's progress bar on the fleet map")
	quota, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#quota tr[data-queue="cq-team-b"] td.usage`)))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(quota).To(ContainSubstring("12 / 8 (150%)"))

	screenshot(t, ctx, "fleet.png")

	// A target that joins shows up without a reload.
	late := tytesting.MakeKubernetesTarget("spoke-late", gpuFlavor).Obj()
	g.Expect(hub.Client.Create(context.Background(), late)).To(Succeed())
	t.Cleanup(func() { _ = hub.Client.Delete(context.Background(), late) })
	g.Eventually(func() ([]string, error) {
		return chromedp.Run(ctx, chromedp.Evaluate[[]string](targetsJS))
	}, 15*time.Second, 250*time.Millisecond).Should(ContainElement("spoke-late"))

	g.Expect(chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`#fleet-map li[data-job="team-a/llama"] a`), chromedp.NodeVisible),
		chromedp.WaitVisible(chromedp.CSS(`dl.placement`)),
	)).To(Succeed(), "open llama's page")
	placed, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(`dl.placement`), "data-target"))
	g.Expect(err).NotTo(HaveOccurred())
	phase, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#job .phase`)))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect([]string{placed.Value, phase}).To(Equal([]string{"spoke-1", "Running"}), "llama's page")
	checkProgress(t, ctx, g)
	screenshot(t, ctx, "job.png")
}

// progressDOM is what Chromium made of the job page's progress: the bar's
// fill, and per curve the points of its polyline as the SVG DOM parsed
// them and the width it drew them across.
const progressDOM = `(() => {
  const bar = document.querySelector('#progress svg.bar.progress');
  const curves = {};
  for (const f of document.querySelectorAll('#progress figure.curve')) {
    const line = f.querySelector('polyline');
    curves[f.dataset.metric] = {points: line ? line.points.numberOfItems : 0, width: line ? Math.round(line.getBBox().width) : 0};
  }
  return {percent: bar ? bar.querySelector('rect.used').width.baseVal.value : -1, curves};
})()`

type renderedProgress struct {
	Percent float64 `json:"percent"`
	Curves  map[string]struct {
		Points int `json:"points"`
		Width  int `json:"width"`
	} `json:"curves"`
}

// checkProgress: llama's page shows its 42% as a bar and a curve per
// metric with a point per history point and one for the newer report,
// drawn across the chart.
func checkProgress(t *testing.T, ctx context.Context, g Gomega) {
	t.Helper()
	g.Expect(chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#progress figure.curve`)))).To(Succeed(), "llama's curves")
	got, err := chromedp.Run(ctx, chromedp.Evaluate[renderedProgress](progressDOM))
	g.Expect(err).NotTo(HaveOccurred())
	t.Logf("progress as Chromium drew it: %+v", got)
	g.Expect(got.Percent).To(BeNumerically("==", 42), "the bar's fill")
	g.Expect(got.Curves).To(HaveLen(3), "curves: progress, loss, eval_accuracy")
	for _, metric := range []string{"progress %", "loss", "eval_accuracy"} {
		c, ok := got.Curves[metric]
		g.Expect(ok).To(BeTrue(), "a curve of %s", metric)
		g.Expect(c.Points).To(Equal(llamaHistoryPoints+1), "points of the %s curve", metric)
		g.Expect(c.Width).To(BeNumerically(">", 300), "the %s curve spans the chart", metric)
	}
}

// screenshot keeps a PNG of the page shown, as name (fleet.png, job.png),
// under $TRAINYARD_ARTIFACTS (or the test's temporary folder);
// TRAINYARD_UPDATE_SCREENSHOT=1 also writes the fleet page to
// docs/images/dashboard.png for the README.
func screenshot(t *testing.T, ctx context.Context, name string) {
	png, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS(`main`), chromedp.NodeVisible))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if len(png) < 8 || !bytes.Equal(png[:8], []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("screenshot is not a PNG (%d bytes)", len(png))
	}
	dir := t.TempDir()
	if a := os.Getenv("TRAINYARD_ARTIFACTS"); a != "" {
		dir = filepath.Join(a, "dashboard")
	}
	paths := []string{filepath.Join(dir, name)}
	if os.Getenv("TRAINYARD_UPDATE_SCREENSHOT") == "1" && name == "fleet.png" {
		paths = append(paths, filepath.Join("..", "..", "..", "docs", "images", "dashboard.png"))
	}
	for _, p := range paths {
		err := errors.Join(os.MkdirAll(filepath.Dir(p), 0o755), os.WriteFile(p, png, 0o644))
		if err != nil {
			t.Fatalf("save screenshot: %v", err)
		}
		t.Logf("screenshot of the page: %s", p)
	}
}
