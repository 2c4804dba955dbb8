// A loopback TCP proxy in front of the apiserver, so a test can cut one client (the operator) off
// from the API while everything else keeps talking to it. TLS passes through untouched.
//   cut()        resets every connection and refuses new ones (the client sees errors at once)
//   blackhole()  keeps connections open but drops all bytes both ways (a half-open partition: the
//                client sees nothing at all until its own timeouts fire)
//   stall()      stops moving bytes both ways without losing any (sockets paused): what a network
//                partition does to a TCP stream; restore() delivers what waited, as TCP would on heal
//   restore()    back to normal
import { createServer, connect, type Server, type Socket } from "node:net";

export type ProxyMode = "pass" | "cut" | "blackhole" | "stall";

export class TcpProxy {
  private server: Server | undefined;
  private readonly sockets = new Set<Socket>();
  mode: ProxyMode = "pass";
  port = 0;

  private readonly targetHost: string;
  private readonly targetPort: number;

  constructor(targetHost: string, targetPort: number) {
    this.targetHost = targetHost;
    this.targetPort = targetPort;
  }

  async start(port = 0, host = "127.0.0.1"): Promise<this> {
    this.server = createServer((client) => this.accept(client));
    await new Promise<void>((resolve, reject) => {
      this.server!.once("error", reject);
      this.server!.listen(port, host, () => resolve());
    });
    const addr = this.server.address();
    this.port = typeof addr === "object" && addr ? addr.port : port;
    return this;
  }

  get url(): string {
    return `https://127.0.0.1:${this.port}`;
  }

  private accept(client: Socket): void {
    if (this.mode === "cut") {
      client.destroy();
      return;
    }
    const upstream = connect(this.targetPort, this.targetHost);
    for (const s of [client, upstream]) {
      this.sockets.add(s);
      s.on("close", () => this.sockets.delete(s));
      s.on("error", () => {
        client.destroy();
        upstream.destroy();
      });
    }
    // In "stall" the sockets are paused, so no data event fires; bytes wait in the kernel's buffers.
    client.on("data", (d) => this.mode !== "blackhole" && upstream.write(d));
    upstream.on("data", (d) => this.mode !== "blackhole" && client.write(d));
    if (this.mode === "stall") {
      client.pause();
      upstream.pause();
    }
    client.on("end", () => upstream.end());
    upstream.on("end", () => client.end());
  }

  cut(): void {
    this.mode = "cut";
    for (const s of this.sockets) s.destroy();
  }

  blackhole(): void {
    this.mode = "blackhole";
  }

  stall(): void {
    this.mode = "stall";
    for (const s of this.sockets) s.pause();
  }

  restore(): void {
    this.mode = "pass";
    for (const s of this.sockets) s.resume();
  }

  async stop(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }
}
