// approve-client.mjs drives mcp-idempotent with the official TypeScript
// client, whose user approves or declines tool calls through elicitation,
// for the Go end-to-end tests (test/e2e/approval_test.go). It prints what
// it saw as one JSON object on stdout; the Go test decides what is right.
//
//   node approve-client.mjs accept|decline stdio COMMAND [ARGS...]
//     runs COMMAND (the proxy) and talks to it over stdio.
//   node approve-client.mjs accept|decline http URL
//     talks to `mcp-idempotent serve` at URL.
//
// Either way: charge_card once, then the same call again (a retry), then
// the charges count. Every elicitation/create it gets is answered with the
// action given, and counted.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const [action, kind, ...rest] = process.argv.slice(2);
if (!["accept", "decline"].includes(action) || !["stdio", "http"].includes(kind) || rest.length === 0) {
  console.error("usage: node approve-client.mjs accept|decline stdio COMMAND [ARGS...] | http URL");
  process.exit(2);
}

const transport =
  kind === "stdio"
    ? new StdioClientTransport({ command: rest[0], args: rest.slice(1), stderr: "inherit" })
    : new StreamableHTTPClientTransport(new URL(rest[0]));
const client = new Client({ name: "mcpi-e2e-ts", version: "0.0.1" }, { capabilities: { elicitation: {} } });

const out = { questions: [], results: [] };
client.setRequestHandler(ElicitRequestSchema, async (req) => {
  out.questions.push(req.params.message);
  return action === "accept" ? { action, content: { note: "approved from TypeScript" } } : { action };
});

await client.connect(transport);
const charge = { name: "charge_card", arguments: { card: "7777", amount: 100 } };
for (let i = 0; i < 2; i++) {
  out.results.push(await client.callTool(charge));
}
const charges = await client.callTool({ name: "charges", arguments: {} });
out.charges = charges.structuredContent?.total ?? null;
if (kind === "http") {
  await transport.terminateSession();
}
await client.close();
console.log(JSON.stringify(out));
