// netprobe: what the lab's network tests run inside pods, where busybox has no UDP client and no TLS server.
//
//	netprobe udp HOST:PORT HEX [TIMEOUT_MS]  sends the bytes, prints the first reply (hex); exit 1 without one
//	netprobe webhook ADDR CERT KEY          an admission webhook (HTTPS, POST any path) that denies every request
//	                                        with "denied by netprobe on $POD_NAME": proof the apiserver called it
//	netprobe get URL [CAFILE]               prints the HTTP status and body; exit 0 on any HTTP answer. Without
//	                                        CAFILE an https server is not verified (busybox's TLS client fails
//	                                        the handshake with Node.js servers)
package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fail("usage: netprobe udp HOST:PORT HEX [TIMEOUT_MS] | netprobe webhook ADDR CERT KEY | netprobe get URL [CAFILE]")
	}
	switch os.Args[1] {
	case "udp":
		if len(os.Args) < 4 {
			fail("usage: netprobe udp HOST:PORT HEX [TIMEOUT_MS]")
		}
		timeout := 2000
		if len(os.Args) > 4 {
			t, err := strconv.Atoi(os.Args[4])
			if err != nil {
				fail("TIMEOUT_MS: " + err.Error())
			}
			timeout = t
		}
		udp(os.Args[2], os.Args[3], time.Duration(timeout)*time.Millisecond)
	case "webhook":
		if len(os.Args) < 5 {
			fail("usage: netprobe webhook ADDR CERT KEY")
		}
		webhook(os.Args[2], os.Args[3], os.Args[4])
	case "get":
		if len(os.Args) < 3 {
			fail("usage: netprobe get URL [CAFILE]")
		}
		ca := ""
		if len(os.Args) > 3 {
			ca = os.Args[3]
		}
		get(os.Args[2], ca)
	default:
		fail("unknown mode " + os.Args[1])
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "netprobe:", msg)
	os.Exit(2)
}

func udp(addr, payloadHex string, timeout time.Duration) {
	payload, err := hex.DecodeString(payloadHex)
	if err != nil {
		fail("HEX: " + err.Error())
	}
	conn, err := net.Dial("udp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "netprobe:", err)
		os.Exit(1)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write(payload); err != nil {
		fmt.Fprintln(os.Stderr, "netprobe:", err)
		os.Exit(1)
	}
	buf := make([]byte, 1500)
	n, err := conn.Read(buf)
	if err != nil {
		fmt.Fprintln(os.Stderr, "netprobe: no reply:", err)
		os.Exit(1)
	}
	fmt.Println(hex.EncodeToString(buf[:n]))
}

func get(url, caFile string) {
	cfg := &tls.Config{InsecureSkipVerify: caFile == ""}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			fail(err.Error())
		}
		cfg.RootCAs = x509.NewCertPool()
		cfg.RootCAs.AppendCertsFromPEM(pem)
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	res, err := client.Get(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, "netprobe:", err)
		os.Exit(1)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	fmt.Printf("%d\n%s\n", res.StatusCode, body)
}

type review struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Request    *struct {
		UID string `json:"uid"`
	} `json:"request,omitempty"`
	Response *reviewResponse `json:"response,omitempty"`
}

type reviewResponse struct {
	UID     string `json:"uid"`
	Allowed bool   `json:"allowed"`
	Status  struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"status"`
}

func webhook(addr, cert, key string) {
	who := os.Getenv("POD_NAME")
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		var in review
		if err == nil {
			err = json.Unmarshal(body, &in)
		}
		if err != nil || in.Request == nil {
			http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
			return
		}
		out := review{APIVersion: in.APIVersion, Kind: in.Kind, Response: &reviewResponse{UID: in.Request.UID}}
		out.Response.Status.Code = http.StatusForbidden
		out.Response.Status.Message = "denied by netprobe on " + who
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
	fmt.Fprintln(os.Stderr, "netprobe: webhook on", addr)
	fail(http.ListenAndServeTLS(addr, cert, key, nil).Error())
}
