// A TCP forwarder run as a lab process (TLS passes through untouched):
//  - real nodes reach the loopback-only apiserver through one on the host's lab-network address;
//  - kube-apiserver reaches etcd through one on loopback, so a test can partition the two:
//    SIGUSR1 stalls every connection (no byte moves either way, none is lost, sockets stay open: what a
//    cut cable does to TCP; dropping bytes instead corrupts the gRPC stream for good), SIGUSR2 restores.
// Usage: forwarder.ts <listen-host> <listen-port> <target-port>
import { TcpProxy } from "./tcp-proxy.ts";

const [host, port, target] = process.argv.slice(2);
if (!host || !port || !target) throw new Error("usage: forwarder.ts <listen-host> <listen-port> <target-port>");
const proxy = await new TcpProxy("127.0.0.1", Number(target)).start(Number(port), host);
process.on("SIGUSR1", () => proxy.stall());
process.on("SIGUSR2", () => proxy.restore());
process.on("SIGTERM", () => void proxy.stop().then(() => process.exit(0)));
