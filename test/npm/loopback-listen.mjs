// loopback-listen.mjs is preloaded into an npm MCP server by the Go
// end-to-end tests (node --import ./loopback-listen.mjs ...). A server
// that listens on a port alone, as server-everything's app.listen(PORT)
// does on every interface, listens on 127.0.0.1 instead; and once it
// listens, the address it got is printed on stderr as
//
//   mcpi-e2e: listening on http://127.0.0.1:PORT
//
// so that a test can pass PORT=0 and learn the port, with no race for a
// free one.
import net from "node:net";

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const port = args[0];
  const portOnly =
    typeof port === "number" || (typeof port === "string" && /^\d+$/.test(port));
  if (portOnly && typeof args[1] !== "string") {
    args[0] = Number(port);
    args.splice(1, 0, "127.0.0.1");
  }
  this.once("listening", () => {
    const addr = this.address();
    if (addr && typeof addr === "object") {
      console.error(`mcpi-e2e: listening on http://${addr.address}:${addr.port}`);
    }
  });
  return listen.apply(this, args);
};
