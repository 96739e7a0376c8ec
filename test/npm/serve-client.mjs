// serve-client.mjs drives `mcp-idempotent serve` with the official
// TypeScript client (StreamableHTTPClientTransport) for the Go end-to-end
// tests (test/e2e/serve_test.go), and prints what it saw as one JSON
// object on stdout. The Go test decides what is right; this script only
// reports.
//
//   node serve-client.mjs basic URL
//     tools/list; charge_card once, given up (aborted, which sends
//     notifications/cancelled) when a line comes on stdin: the test sends
//     it once the server has charged; then the same call twice more (the
//     retries); then the charges count.
//   node serve-client.mjs resume URL
//     one charge_card call; the Go test cuts the connections while it is
//     under way. Prints "calling" on stderr when the request has gone,
//     and "primed" when its stream has given it an event id.
//   node serve-client.mjs keepalive URL
//     one charge_card call, whose stream is watched on its way to the
//     client's parser: prints "kept alive" on stderr once a keep-alive
//     comment has come on it (the Go test then lets the call end), and
//     counts them.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { createInterface } from "node:readline";

const [mode, url] = process.argv.slice(2);
if (!["basic", "resume", "keepalive"].includes(mode) || !url) {
  console.error("usage: node serve-client.mjs basic|resume|keepalive URL");
  process.exit(2);
}

// watchCalls is a fetch that hands the client the response to a
// tools/call as it comes, and counts the keep-alive comments in it.
let keepAlives = 0;
async function watchCalls(input, init) {
  const res = await fetch(input, init);
  if (init?.method !== "POST" || !String(init?.body ?? "").includes('"tools/call"') || !res.body) {
    return res;
  }
  const [watched, passed] = res.body.tee();
  (async () => {
    const decoder = new TextDecoder();
    let text = "";
    for await (const chunk of watched) {
      text += decoder.decode(chunk, { stream: true });
      const seen = (text.match(/^: keep-alive$/gm) ?? []).length;
      if (seen > 0 && keepAlives === 0) console.error("kept alive");
      keepAlives = seen;
    }
  })();
  return new Response(passed, { status: res.status, statusText: res.statusText, headers: res.headers });
}

const transportErrors = [];
const transport = new StreamableHTTPClientTransport(new URL(url), {
  ...(mode === "keepalive" ? { fetch: watchCalls } : {}),
  // Resume a broken stream at once: the default waits a second.
  reconnectionOptions: {
    initialReconnectionDelay: 10,
    maxReconnectionDelay: 200,
    reconnectionDelayGrowFactor: 1.5,
    maxRetries: 5,
  },
});
transport.onerror = (err) => transportErrors.push(String(err?.message ?? err));
const client = new Client({ name: "mcpi-e2e-ts", version: "0.0.1" });

const out = { transportErrors };
const charge = { name: "charge_card", arguments: { card: "5555", amount: 100 } };

await client.connect(transport);
out.protocolVersion = transport.protocolVersion;
out.sessionId = transport.sessionId ?? null;

if (mode === "basic") {
  const tools = await client.listTools();
  out.tools = tools.tools.map((t) => t.name);
  const giveUp = new AbortController();
  const first = client.callTool(charge, undefined, { signal: giveUp.signal });
  console.error("calling");
  const lines = createInterface({ input: process.stdin });
  for await (const _ of lines) break;
  giveUp.abort("the caller gave up");
  try {
    await first;
    out.firstCall = "answered";
  } catch (err) {
    out.firstCall = String(err?.message ?? err);
  }
  out.retries = [];
  for (let i = 0; i < 2; i++) {
    out.retries.push(await client.callTool(charge));
  }
} else if (mode === "keepalive") {
  out.result = await client.callTool(charge);
  out.keepAlives = keepAlives;
} else {
  out.resumptionTokens = [];
  const pending = client.callTool(charge, undefined, {
    onresumptiontoken: (token) => {
      // Said once, on the first: the Go test cuts the connection only
      // once the client holds an event id to resume from.
      if (out.resumptionTokens.length === 0) console.error("primed");
      out.resumptionTokens.push(token);
    },
  });
  console.error("calling");
  out.result = await pending;
}

const charges = await client.callTool({ name: "charges", arguments: {} });
out.charges = charges.structuredContent?.total ?? null;
await transport.terminateSession();
await client.close();
console.log(JSON.stringify(out));
