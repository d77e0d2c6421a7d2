package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"image/color"
	"image/png"
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
// goes to docs/report.png for the README with BB_UPDATE_DOCS=1. Then the same runs
// as PNG and SVG files.
func TestPlotInChromium(t *testing.T) {
	functional(t)
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
	// Per run: throughput and ping, bottleneck, inside the qdiscs (the kernel's
	// sojourn); across runs: CDF, two box plots, bar, and the flows' fairness.
	if len(p.Charts) != 2*3+5 {
		t.Errorf("want %d charts, the page has %d", 2*3+5, len(p.Charts))
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
	screenshot, err := os.ReadFile(shot)
	if err != nil || len(screenshot) < 10000 {
		t.Fatalf("screenshot %s: %v (%d bytes)", shot, err, len(screenshot))
	}
	// The README's screenshot, when asked for: a test run leaves the tree as it was.
	if os.Getenv("BB_UPDATE_DOCS") != "" {
		if err := os.WriteFile("../docs/report.png", screenshot, 0o644); err != nil {
			t.Error(err)
		}
	}

	// The same runs as image files in flent's layouts, PNG and SVG, beside the page:
	// each image as wide as asked and carrying both runs' colours in its plot, not
	// only in its legend (a legend swatch is about 150 pixels; box_totals' outlines
	// draw about 500).
	r = bb(t, append([]string{"plot", "--png", "--svg", "--width", "1000", "-o", page}, files...)...)
	if r.err != nil {
		t.Fatalf("plot --png --svg: %v\n%s", r.err, r.stderr)
	}
	for _, layout := range []string{"all_scaled", "all", "ping_cdf", "totals", "box_totals", "qdisc"} {
		base := filepath.Join(out, "report-"+layout)
		if !strings.Contains(r.stderr, "wrote "+base+".png") {
			t.Errorf("plot does not say it wrote %s.png:\n%s", base, r.stderr)
		}
		f, err := os.Open(base + ".png")
		if err != nil {
			t.Error(err)
			continue
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Errorf("%s.png: %v", base, err)
			continue
		}
		if w := img.Bounds().Dx(); w != 1000 {
			t.Errorf("%s.png is %d pixels wide, want 1000", base, w)
		}
		runColours := []color.NRGBA{{0x1f, 0x77, 0xb4, 0xff}, {0xff, 0x7f, 0x0e, 0xff}}
		counts := make([]int, len(runColours))
		b := img.Bounds()
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				c := color.NRGBAModel.Convert(img.At(x, y)).(color.NRGBA)
				for i, rc := range runColours {
					if c == rc {
						counts[i]++
					}
				}
			}
		}
		t.Logf("%s.png: %v pixels of each run's colour", layout, counts)
		for i, n := range counts {
			if n < 300 {
				t.Errorf("%s.png has %d pixels of run %d's colour: the run is not drawn", layout, n, i+1)
			}
		}
		svg, err := os.ReadFile(base + ".svg")
		if err != nil || !strings.Contains(string(svg), "<svg") {
			t.Errorf("%s.svg: %v, %d bytes", base, err, len(svg))
		}
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
