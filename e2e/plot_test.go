package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// chromium runs Debian's Chromium headless with the flags this machine's closed
// network needs (no background connections, no component updates).
func chromium(t *testing.T, args ...string) []byte {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is missing: bash scripts/install-deps")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir(), "--virtual-time-budget=10000"}
	cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, stderr.String())
	}
	return out
}

// The probe goes first in <head> to hear every error, and last in <body> to read
// every chart back from ECharts once the page has drawn.
const probeHead = `<script>window.__errors=[];window.addEventListener('error',function(e){window.__errors.push(String(e.message))});</script>`
const probeBody = `<script>setTimeout(function(){var out={errors:window.__errors,charts:[]};
document.querySelectorAll('div.item').forEach(function(d){var c=(typeof echarts!=='undefined')&&echarts.getInstanceByDom(d);var o=c?c.getOption():null;
out.charts.push({id:d.id,title:o&&o.title&&o.title[0]?o.title[0].text:'',legend:o&&o.legend&&o.legend[0]?(o.legend[0].data||[]).length:0,
series:o?o.series.map(function(s){return (s.data||[]).length}):[],canvas:d.querySelectorAll('canvas').length})});
var p=document.createElement('pre');p.id='bbcheck';p.textContent=JSON.stringify(out);document.body.appendChild(p)},1000)</script>`

type probe struct {
	Errors []string `json:"errors"`
	Charts []struct {
		ID     string `json:"id"`
		Title  string `json:"title"`
		Series []int  `json:"series"`
		Canvas int    `json:"canvas"`
	} `json:"charts"`
}

// The HTML report of a tcp_4down run with two setups, driven in headless Chromium:
// no JavaScript error, every chart drawn with data in every series; its screenshot
// goes to docs/report.png for the README.
func TestPlotInChromium(t *testing.T) {
	inv, _ := lab(t, "--gso", "off")
	appendSetups(t, inv, compareSetups)
	out := t.TempDir()
	r := bb(t, "run", "-H", inv, "--setup", "htb+pfifo", "--setup", "htb+bfifo", "-l", "6", "-d", "2", "-o", out, "tcp_4down")
	if r.err != nil {
		t.Fatalf("%v\n%s", r.err, r.stderr)
	}
	files, _ := filepath.Glob(filepath.Join(out, "*.bb.json.gz"))
	page := filepath.Join(out, "report.html")
	if r := bb(t, append([]string{"plot", "-o", page, "--title", "tcp_4down, two setups"}, files...)...); r.err != nil {
		t.Fatalf("plot: %v\n%s", r.err, r.stderr)
	}
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	// Self-contained: no script or style from anywhere else.
	if m := regexp.MustCompile(`<(script|link)[^>]+(src|href)="[^"]+"`).FindString(string(b)); m != "" {
		t.Errorf("the page loads something from outside: %s", m)
	}
	p := probeCharts(t, page)
	for _, e := range p.Errors {
		t.Errorf("JavaScript error: %s", e)
	}
	// Per run: throughput and ping, bottleneck; across runs: CDF, two box plots, bar,
	// and the flows' fairness.
	if len(p.Charts) != 2*2+5 {
		t.Errorf("want %d charts, the page has %d", 2*2+5, len(p.Charts))
	}
	for _, c := range p.Charts {
		empty := c.Canvas == 0 || len(c.Series) == 0 || c.Title == ""
		for _, n := range c.Series {
			empty = empty || n == 0
		}
		if empty {
			t.Errorf("chart %s (%q) is empty: series sizes %v, %d canvas", c.ID, c.Title, c.Series, c.Canvas)
		} else {
			t.Logf("chart %s %q: series sizes %v", c.ID, c.Title, c.Series)
		}
	}
	shot := filepath.Join(out, "report.png")
	chromium(t, "--screenshot="+shot, "--window-size=1200,2400", "--hide-scrollbars", "file://"+page)
	png, err := os.ReadFile(shot)
	if err != nil || len(png) < 10000 {
		t.Fatalf("screenshot %s: %v (%d bytes)", shot, err, len(png))
	}
	if err := os.MkdirAll("../docs", 0o755); err == nil {
		os.WriteFile("../docs/report.png", png, 0o644)
	}
}

// probeCharts loads the page in headless Chromium with the probe in it and returns
// what the probe saw: JavaScript errors and every chart's series.
func probeCharts(t *testing.T, page string) probe {
	t.Helper()
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	// ECharts' own code holds "</body>" in a string: the probe goes before the last.
	doc := strings.Replace(string(b), "<head>", "<head>\n"+probeHead, 1)
	end := strings.LastIndex(doc, "</body>")
	if end < 0 {
		t.Fatalf("the page has no </body>")
	}
	probed := doc[:end] + probeBody + "\n" + doc[end:]
	probePage := filepath.Join(t.TempDir(), "probe.html")
	if err := os.WriteFile(probePage, []byte(probed), 0o644); err != nil {
		t.Fatal(err)
	}
	dom := string(chromium(t, "--dump-dom", "file://"+probePage))
	m := regexp.MustCompile(`(?s)<pre id="bbcheck">(.*?)</pre>`).FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("the probe did not report (the page's scripts did not run?):\n%.2000s", dom)
	}
	var p probe
	if err := json.Unmarshal([]byte(html.UnescapeString(m[1])), &p); err != nil {
		t.Fatalf("probe: %v\n%s", err, m[1])
	}
	return p
}

// emptyCharts lists the charts the probe saw drawn with no data.
func emptyCharts(p probe) []string {
	var out []string
	for _, c := range p.Charts {
		empty := c.Canvas == 0 || len(c.Series) == 0 || c.Title == ""
		for _, n := range c.Series {
			empty = empty || n == 0
		}
		if empty {
			out = append(out, fmt.Sprintf("%s (%q, series %v, %d canvas)", c.ID, c.Title, c.Series, c.Canvas))
		}
	}
	return out
}
