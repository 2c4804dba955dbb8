// What tests assert about the apiserver saying no: its status code and message, or undefined when it said yes.
import { ApiException } from "@kubernetes/client-node";

export interface Refusal {
  code: number;
  message: string;
}

/** The apiserver's refusal of a request, or undefined when it was allowed; any other error is rethrown. */
export async function refusal(req: Promise<unknown>): Promise<Refusal | undefined> {
  try {
    await req;
    return undefined;
  } catch (e) {
    if (!(e instanceof ApiException)) throw e;
    const body = typeof e.body === "string" ? (JSON.parse(e.body) as { message?: string }) : (e.body as { message?: string });
    return { code: e.code, message: body?.message ?? "" };
  }
}
