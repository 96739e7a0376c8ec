// npx-client.mjs runs `npx mcp-idempotent -- node charge-server.mjs` in an
// npm project where the mcp-idempotent packages are installed, with the
// official TypeScript client on stdio, for test/e2e/npm_test.go. It calls
// charge_card twice with the same arguments (the second call is the
// client's retry) and prints both results and the charges count as one
// JSON object. The Go test decides what is right.
//
//   node npx-client.mjs PROJECT_DIR
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { fileURLToPath } from "node:url";

const [project] = process.argv.slice(2);
if (!project) {
  console.error("usage: node npx-client.mjs PROJECT_DIR");
  process.exit(2);
}
const server = fileURLToPath(new URL("charge-server.mjs", import.meta.url));
const transport = new StdioClientTransport({
  command: "npx",
  args: ["--no", "mcp-idempotent", "--", "node", server],
  cwd: project,
  stderr: "inherit",
});
const client = new Client({ name: "mcpi-npx-ts", version: "0.0.1" });
await client.connect(transport);

const charge = { name: "charge_card", arguments: { card: "4242", amount: 100 } };
const out = { first: await client.callTool(charge), retry: await client.callTool(charge) };
const charges = await client.callTool({ name: "charges", arguments: {} });
out.charges = charges.structuredContent?.total ?? null;
await client.close();
console.log(JSON.stringify(out));
