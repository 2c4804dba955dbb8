package main

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestConfigFromEnv(t *testing.T) {
	base := map[string]string{"LEDGER_DIR": "/l", "IDENTITY": "ledger-0", "POD_UID": "u", "NODE_NAME": "n"}
	c, err := configFromEnv(env(base))
	if err != nil || c.interval != 100*time.Millisecond {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	base["INTERVAL_MS"] = "0"
	if _, err := configFromEnv(env(base)); err == nil {
		t.Fatal("INTERVAL_MS=0 accepted")
	}
	delete(base, "POD_UID")
	base["INTERVAL_MS"] = "20"
	if _, err := configFromEnv(env(base)); err == nil {
		t.Fatal("missing POD_UID accepted")
	}
}

func TestRecordFormat(t *testing.T) {
	line, err := encode(Record{Identity: "ledger-0", PodUID: "u", Node: "n", Run: "r", Seq: 7, Time: "2026-01-02T03:04:05.123456789Z"})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"identity":"ledger-0","podUID":"u","node":"n","run":"r","seq":7,"time":"2026-01-02T03:04:05.123456789Z"}` + "\n"
	if string(line) != want {
		t.Fatalf("got %s want %s", line, want)
	}
	line, _ = encode(Record{Token: "5"})
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil || m["token"] != "5" {
		t.Fatalf("token: %s", line)
	}
}

func TestRunAppendsConsecutiveRecordsAndStops(t *testing.T) {
	dir := t.TempDir()
	// A torn tail left by a writer that lost power: this writer's first record must start a new line.
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte(`{"identity":"ledger-0","po`), 0o644); err != nil {
		t.Fatal(err)
	}
	stop := make(chan os.Signal, 1)
	done := make(chan uint64)
	go func() {
		n, err := run(config{dir: dir, identity: "ledger-0", podUID: "u", node: "n", interval: 5 * time.Millisecond}, stop, io.Discard)
		if err != nil {
			t.Error(err)
		}
		done <- n
	}()
	time.Sleep(100 * time.Millisecond)
	stop <- os.Interrupt
	n := <-done
	f, err := os.Open(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	s.Scan() // the torn fragment
	var seq uint64
	for s.Scan() {
		var r Record
		if err := json.Unmarshal(s.Bytes(), &r); err != nil {
			t.Fatalf("line after the torn one: %v: %q", err, s.Text())
		}
		seq++
		if r.Seq != seq {
			t.Fatalf("seq %d, want %d", r.Seq, seq)
		}
	}
	if seq != n || n == 0 {
		t.Fatalf("%d records in the file, run reported %d", seq, n)
	}
}
