// ledger: the lab's single-writer workload. It appends one JSON line per interval to
// $LEDGER_DIR/ledger.jsonl on a ReadWriteOnce volume whose storage has no lock of its own (the lab's
// "SAN"), fsyncing every write, so that two instances of one identity writing at once leave evidence
// in the file that lab/ledger.ts's checker reads. It never skips a write silently: any write or fsync
// error ends the process with a non-zero status.
//
// Environment: LEDGER_DIR (the volume's mount), IDENTITY (pod name), POD_UID, NODE_NAME, INTERVAL_MS
// (default 100), TOKEN_FILE (optional: a file whose trimmed contents, read before every write, go in
// the record's token, e.g. a downward-API projection of the claim's fencing-token annotation).
package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// FileName is the ledger's file inside LEDGER_DIR.
const FileName = "ledger.jsonl"

// Record is one line of the ledger. Field names are read by lab/ledger.ts.
type Record struct {
	Identity string `json:"identity"`
	PodUID   string `json:"podUID"`
	Node     string `json:"node"`
	// Run is random per process start: a container restarted inside the same pod starts a new run
	// at seq 1, which the checker can then tell from a duplicated write.
	Run  string `json:"run"`
	Seq  uint64 `json:"seq"`
	Time string `json:"time"`
	// Token is omitted when TOKEN_FILE is unset or empty.
	Token string `json:"token,omitempty"`
}

type config struct {
	dir       string
	identity  string
	podUID    string
	node      string
	interval  time.Duration
	tokenFile string
}

func configFromEnv(getenv func(string) string) (config, error) {
	c := config{
		dir:       getenv("LEDGER_DIR"),
		identity:  getenv("IDENTITY"),
		podUID:    getenv("POD_UID"),
		node:      getenv("NODE_NAME"),
		interval:  100 * time.Millisecond,
		tokenFile: getenv("TOKEN_FILE"),
	}
	var missing []string
	for _, kv := range [][2]string{{"LEDGER_DIR", c.dir}, {"IDENTITY", c.identity}, {"POD_UID", c.podUID}, {"NODE_NAME", c.node}} {
		if kv[1] == "" {
			missing = append(missing, kv[0])
		}
	}
	if len(missing) > 0 {
		return c, fmt.Errorf("missing environment variable(s) %s", strings.Join(missing, ", "))
	}
	if s := getenv("INTERVAL_MS"); s != "" {
		ms, err := strconv.Atoi(s)
		if err != nil || ms <= 0 {
			return c, fmt.Errorf("INTERVAL_MS must be a positive integer of milliseconds, got %q", s)
		}
		c.interval = time.Duration(ms) * time.Millisecond
	}
	return c, nil
}

// encode returns the record as one line, newline included, so that it is appended by a single write.
func encode(r Record) ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

func newRun() string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		// crypto/rand does not fail on Linux; a fixed run would only weaken restart detection.
		return "norandom"
	}
	return hex.EncodeToString(b)
}

func readToken(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read TOKEN_FILE: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// endsTorn reports whether the file's last byte is not a newline: a previous writer was cut off in
// the middle of a record (a power-off). The first record then starts on a new line, so the torn
// fragment stays a line of its own instead of swallowing this writer's first record.
func endsTorn(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return false, err
	}
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, st.Size()-1); err != nil && !errors.Is(err, io.EOF) {
		return false, err
	}
	return b[0] != '\n', nil
}

// run appends records until stop delivers a signal; it returns the number of records written.
func run(c config, stop <-chan os.Signal, stdout io.Writer) (uint64, error) {
	path := filepath.Join(c.dir, FileName)
	// No MkdirAll: a missing LEDGER_DIR means the volume is not mounted, and writing into the
	// container's own filesystem instead would hide exactly what the ledger is for.
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return 0, err
	}
	torn, err := endsTorn(path)
	if err != nil {
		f.Close()
		return 0, fmt.Errorf("read the end of %s: %w", path, err)
	}
	r := Record{Identity: c.identity, PodUID: c.podUID, Node: c.node, Run: newRun()}
	fmt.Fprintf(stdout, "ledger: %s (pod %s, run %s) on %s appends to %s every %s\n", r.Identity, r.PodUID, r.Run, r.Node, path, c.interval)
	tick := time.NewTicker(c.interval)
	defer tick.Stop()
	for {
		// A pending signal wins over a due tick: nothing is written after SIGTERM was received.
		select {
		case <-stop:
			fmt.Fprintf(stdout, "ledger: stopped after %d records\n", r.Seq)
			return r.Seq, f.Close()
		default:
		}
		token, err := readToken(c.tokenFile)
		if err != nil {
			f.Close()
			return r.Seq, err
		}
		r.Seq++
		r.Token = token
		r.Time = time.Now().UTC().Format(time.RFC3339Nano)
		line, err := encode(r)
		if err != nil {
			f.Close()
			return r.Seq - 1, err
		}
		if torn {
			line = append([]byte{'\n'}, line...)
			torn = false
		}
		if _, err := f.Write(line); err != nil {
			f.Close()
			return r.Seq - 1, fmt.Errorf("write record %d: %w", r.Seq, err)
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return r.Seq - 1, fmt.Errorf("fsync after record %d: %w", r.Seq, err)
		}
		select {
		case <-stop:
			fmt.Fprintf(stdout, "ledger: stopped after %d records\n", r.Seq)
			return r.Seq, f.Close()
		case <-tick.C:
		}
	}
}

func main() {
	c, err := configFromEnv(os.Getenv)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ledger: %v\n", err)
		os.Exit(2)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	if _, err := run(c, stop, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "ledger: %s: %v\n", c.identity, err)
		os.Exit(1)
	}
}
