// The hardware (or softdog) watchdog: opening the device arms it; every write feeds it; writing "V" then closing
// disarms it (the kernel's "magic close"); closing without "V" leaves it armed, so the machine resets when the
// timeout runs out. The timeout is read from sysfs (never assumed), before the device is opened: a watchdog whose
// timeout we cannot state is never armed, since the record would promise nothing the operator could count on.
import { closeSync, constants, openSync, readFileSync, writeSync } from "node:fs";
import { basename } from "node:path";

/** The sysfs file holding a watchdog device's timeout in seconds. */
export const defaultTimeoutFile = (device: string) => `/sys/class/watchdog/${basename(device)}/timeout`;

export type OpenedWatchdog = { armed: true; watchdog: Watchdog; timeoutSeconds: number } | { armed: false; problem: string };

export class Watchdog {
  #fd: number | undefined;
  readonly device: string;
  /** Bytes written to feed it (for metrics and tests). */
  feeds = 0;

  private constructor(device: string, fd: number) {
    this.device = device;
    this.#fd = fd;
  }

  /**
   * Reads the timeout, then opens the device for writing (which arms it). Never creates the device path: a missing
   * device is reported, not replaced by a plain file. Any failure → armed=false with the reason, nothing left open.
   */
  static open(device: string, timeoutFile = defaultTimeoutFile(device)): OpenedWatchdog {
    let timeoutSeconds: number;
    try {
      const raw = readFileSync(timeoutFile, "utf8").trim();
      timeoutSeconds = Number(raw);
      if (!/^[0-9]{1,4}$/.test(raw) || timeoutSeconds < 1)
        return {
          armed: false,
          problem: `the watchdog timeout in ${timeoutFile} is ${JSON.stringify(raw)}, not a whole number of seconds ≥ 1`,
        };
    } catch (err) {
      return { armed: false, problem: `cannot read the watchdog timeout from ${timeoutFile}: ${(err as Error).message}` };
    }
    let fd: number;
    try {
      // O_WRONLY without O_CREAT: a missing /dev/watchdog must stay missing (and a plain file is never made in /dev).
      fd = openSync(device, constants.O_WRONLY);
    } catch (err) {
      return { armed: false, problem: `cannot open the watchdog device ${device}: ${(err as Error).message}` };
    }
    return { armed: true, watchdog: new Watchdog(device, fd), timeoutSeconds };
  }

  get open(): boolean {
    return this.#fd !== undefined;
  }

  /** One byte written: the watchdog's countdown restarts. Throws if the write fails (the caller logs it). */
  feed(): void {
    if (this.#fd === undefined) throw new Error(`the watchdog ${this.device} is closed`);
    writeSync(this.#fd, "\0");
    this.feeds++;
  }

  /** Magic close: "V" then close. The watchdog stops counting (drivers with nowayout set ignore it and reset anyway). */
  disarm(): void {
    if (this.#fd === undefined) return;
    const fd = this.#fd;
    this.#fd = undefined;
    try {
      writeSync(fd, "V");
    } finally {
      closeSync(fd);
    }
  }

  /** Close without "V": the watchdog stays armed and resets the machine when its timeout runs out. */
  closeArmed(): void {
    if (this.#fd === undefined) return;
    const fd = this.#fd;
    this.#fd = undefined;
    closeSync(fd);
  }
}

/**
 * Feeds a watchdog on its own timer, every `periodMs`, asking `mayFeed(nowMono)` right before every write: a check
 * that hangs never starves the watchdog before the deadline, nor feeds it past the deadline (the answer is taken at
 * the moment of the write, not when some request returns).
 */
export class Feeder {
  #timer: NodeJS.Timeout | undefined;
  readonly #wd: Pick<Watchdog, "feed">;
  readonly #mayFeed: (nowMono: number) => boolean;
  readonly #now: () => number;
  readonly #onError: (err: unknown) => void;
  /** Ticks at which feeding was refused (the deadline passed or a fence was seen). */
  withheld = 0;

  constructor(wd: Pick<Watchdog, "feed">, mayFeed: (nowMono: number) => boolean, now: () => number, onError: (err: unknown) => void) {
    this.#wd = wd;
    this.#mayFeed = mayFeed;
    this.#now = now;
    this.#onError = onError;
  }

  /** One tick: feeds iff allowed now. Returns whether it fed. */
  tick(): boolean {
    if (!this.#mayFeed(this.#now())) {
      this.withheld++;
      return false;
    }
    try {
      this.#wd.feed();
      return true;
    } catch (err) {
      this.#onError(err);
      return false;
    }
  }

  start(periodMs: number): void {
    this.stop();
    this.tick();
    this.#timer = setInterval(() => this.tick(), periodMs);
  }

  stop(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
  }
}

/** How often to feed: a third of the timeout or the check interval, whichever is smaller. */
export const feedPeriodMs = (timeoutSeconds: number, checkIntervalSeconds: number) =>
  Math.max(100, Math.min((timeoutSeconds * 1000) / 3, checkIntervalSeconds * 1000));
