// charge-server.mjs is an MCP server on stdio, made with the official
// TypeScript SDK, for the npm package's end-to-end test
// (test/e2e/npm_test.go): charge_card charges and says which charge it
// was; charges says how many there were.
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { CallToolRequestSchema, ListToolsRequestSchema } from "@modelcontextprotocol/sdk/types.js";

let charges = 0;
const server = new Server({ name: "charge-server", version: "0.0.1" }, { capabilities: { tools: {} } });
server.setRequestHandler(ListToolsRequestSchema, async () => ({
  tools: [
    {
      name: "charge_card",
      description: "Charges a card.",
      inputSchema: { type: "object", properties: { card: { type: "string" }, amount: { type: "number" } } },
    },
    {
      name: "charges",
      description: "How many charges were made.",
      inputSchema: { type: "object" },
      annotations: { readOnlyHint: true },
    },
  ],
}));
server.setRequestHandler(CallToolRequestSchema, async (req) => {
  switch (req.params.name) {
    case "charge_card":
      charges++;
      return { content: [{ type: "text", text: `charge #${charges}` }] };
    case "charges":
      return { content: [{ type: "text", text: String(charges) }], structuredContent: { total: charges } };
    default:
      throw new Error(`unknown tool ${req.params.name}`);
  }
});
await server.connect(new StdioServerTransport());
