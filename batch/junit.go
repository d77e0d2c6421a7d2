package batch

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"math"
	"strings"
	"time"
)

// The JUnit XML a batch writes with Options.JUnit, in the Jenkins/Surefire schema
// that Jenkins' junit step, GitLab's artifacts:reports:junit and the Actions
// reporters read (the xunit plugin's junit-10.xsd, batch/testdata, validates it):
//
//	<testsuites name="bloatbench batch NAME">
//	  <testsuite name="TEST (STREAMS).SETUP">       one a test and setup
//	    <testcase classname="TEST (STREAMS).SETUP" name="run RUN-ID" time="…">
//	    <testcase classname="TEST (STREAMS).SETUP" name="METRIC (UNITS) not worse than +10%">
//	  <testsuite name="batch NAME">                 the batch itself
//	    <testcase name="batch ran to its end">, <testcase name="verdict written">
//
// A run is a test case, its time the run's, an <error> if it failed (with the
// error's text), was interrupted or left an unreadable data file; a threshold
// applied to a test and setup is a test case too, a <failure> when it is a
// regression (with the baseline, the number now, the change and the threshold in
// its message). A threshold the batch had nothing to judge with (no baseline, or
// none of this test and setup in it, or a metric one batch lacks) is <skipped>
// with the reason, as is a run the batch did not get to: Jenkins and GitLab count
// and list skipped tests apart, keeping the build's colour, where a pass would
// claim a threshold held and a failure would turn every new test or setup red.
// The class name is the test and the setup, so Jenkins shows each test a package
// and each setup a class under it.

type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Errors   int          `xml:"errors,attr"`
	Time     string       `xml:"time,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name       string        `xml:"name,attr"`
	Tests      int           `xml:"tests,attr"`
	Failures   int           `xml:"failures,attr"`
	Errors     int           `xml:"errors,attr"`
	Skipped    int           `xml:"skipped,attr"`
	Time       string        `xml:"time,attr"`
	Timestamp  string        `xml:"timestamp,attr,omitempty"`
	Properties *junitProps   `xml:"properties,omitempty"`
	Cases      []junitCase   `xml:"testcase"`
	elapsed    time.Duration // the suite's runs'
	started    time.Time     // its first run's
}

type junitProps struct {
	Props []junitProp `xml:"property"`
}

type junitProp struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

type junitCase struct {
	Name      string       `xml:"name,attr"`
	Classname string       `xml:"classname,attr"`
	Time      string       `xml:"time,attr"`
	Skipped   *junitResult `xml:"skipped,omitempty"`
	Error     *junitResult `xml:"error,omitempty"`
	Failure   *junitResult `xml:"failure,omitempty"`
	SystemOut string       `xml:"system-out,omitempty"`
}

type junitResult struct {
	Type    string `xml:"type,attr,omitempty"`
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

// maxMessage bounds a message attribute (one line in Jenkins' list); the whole
// text is the element's.
const maxMessage = 1024

func result(typ, text string) *junitResult {
	text = visible(text)
	msg := text
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	msg = truncate(msg, maxMessage)
	if msg == text {
		return &junitResult{Type: typ, Message: msg}
	}
	return &junitResult{Type: typ, Message: msg, Text: text}
}

// truncate cuts s to at most n bytes on a rune's boundary, with "…".
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && s[cut]&0xc0 == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.3f", d.Seconds()) }

// junitXML is the batch's JUnit XML.
func junitXML(in *reportInput) ([]byte, error) {
	var suites []*junitSuite
	byClass := map[string]*junitSuite{}
	suite := func(class string) *junitSuite {
		s := byClass[class]
		if s == nil {
			s = &junitSuite{Name: class}
			byClass[class] = s
			suites = append(suites, s)
		}
		return s
	}
	res := in.Result
	for _, r := range in.Runs {
		s := suite(visible(r.Class))
		c := junitCase{Name: visible("run " + r.Run.ID), Classname: s.Name, Time: seconds(r.Elapsed)}
		switch r.Status {
		case "ok":
			c.SystemOut = visible("data: " + r.Data + "\n")
		case "failed":
			c.Error = result("run failed", r.Error)
		case "interrupted":
			c.Error = result("interrupted", strings.TrimSuffix("interrupted: "+r.Error, ": "))
		case "incomplete":
			c.Error = result("incomplete", fmt.Sprintf("its data file %s is incomplete or unreadable; `bloatbench batch --resume %s` runs it again", r.Data, in.Dir))
		default:
			c.Skipped = result("", "not run: the batch stopped before it; `bloatbench batch --resume "+in.Dir+"` runs what is left")
		}
		if !r.Started.IsZero() && (s.started.IsZero() || r.Started.Before(s.started)) {
			s.started = r.Started
		}
		s.elapsed += r.Elapsed
		s.Cases = append(s.Cases, c)
	}
	for _, ch := range in.Checks {
		s := suite(visible(className(ch.Test, ch.Streams, ch.Setup)))
		c := junitCase{Name: visible(metricLabel(ch) + " not worse than " + ch.Threshold), Classname: s.Name, Time: seconds(0)}
		numbers := fmt.Sprintf("baseline %s, now %s, change %s, threshold %s", checkValue(ch, ch.Baseline), checkValue(ch, ch.Current), pct(ch.Change), ch.Threshold)
		detail := fmt.Sprintf("%s\np %.3f (Mann-Whitney U), %d baseline runs (%s), %d now\n", numbers, ch.P, ch.BaselineRuns, in.Baseline, ch.CurrentRuns)
		switch {
		case ch.Regression:
			c.Failure = result("regression", detail)
		case !in.Judged || math.IsNaN(ch.Baseline) || math.IsNaN(ch.Current):
			// Nothing to judge with: the note says why.
			c.Skipped = result("", ch.Note)
		default:
			if ch.Note != "" {
				detail += ch.Note + "\n"
			}
			c.SystemOut = visible(detail)
		}
		s.Cases = append(s.Cases, c)
	}
	// The batch itself: whether it ran to its end, and wrote its verdict.
	b := suite(visible("batch " + in.Batch))
	b.started = in.Started
	end := junitCase{Name: "batch ran to its end", Classname: b.Name, Time: seconds(0)}
	if res.Interrupted {
		end.Error = result("interrupted", fmt.Sprintf("interrupted with %d of %d runs complete; `bloatbench batch --resume %s` runs what is left", res.Done, res.Runs, in.Dir))
	} else {
		end.SystemOut = visible(fmt.Sprintf("%d of %d runs complete, %d failed\n", res.Done, res.Runs, len(res.Failed)))
	}
	verdict := junitCase{Name: "verdict written", Classname: b.Name, Time: seconds(0)}
	switch {
	case in.Err != nil:
		verdict.Error = result("batch error", in.Err.Error())
	case in.Baseline != "":
		n := Regressions(in.Checks)
		verdict.SystemOut = visible(fmt.Sprintf("%d regression%s against %s\n", n, map[bool]string{true: "s"}[n != 1], in.Baseline))
	default:
		verdict.SystemOut = "no baseline to judge against\n"
	}
	b.Cases = append(b.Cases, end, verdict)
	b.Properties = &junitProps{Props: []junitProp{{"batch", visible(in.Dir)}, {"baseline", visible(in.Baseline)}, {"tool_version", visible(in.Version)}}}

	out := junitSuites{Name: visible("bloatbench batch " + in.Batch)}
	var total time.Duration
	for _, s := range suites {
		for _, c := range s.Cases {
			s.Tests++
			switch {
			case c.Failure != nil:
				s.Failures++
			case c.Error != nil:
				s.Errors++
			case c.Skipped != nil:
				s.Skipped++
			}
		}
		s.Time = seconds(s.elapsed)
		if !s.started.IsZero() {
			// ISO 8601 without a zone, as Ant and Surefire write it (their schema
			// has none): UTC.
			s.Timestamp = s.started.UTC().Format("2006-01-02T15:04:05")
		}
		out.Tests += s.Tests
		out.Failures += s.Failures
		out.Errors += s.Errors
		total += s.elapsed
		out.Suites = append(out.Suites, *s)
	}
	out.Time = seconds(total)
	var buf bytes.Buffer
	buf.WriteString(xml.Header)
	enc := xml.NewEncoder(&buf)
	enc.Indent("", "  ")
	if err := enc.Encode(out); err != nil {
		return nil, err
	}
	buf.WriteString("\n")
	return buf.Bytes(), nil
}
