// The TypeScript SDK 1.x client (@modelcontextprotocol/sdk, what most IDEs and desktop hosts
// embed) over Streamable HTTP: connect (initialize, a session), then run the plan.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { describe, emit, readArgs, runSteps } from "./plan.mjs";

const { url, headers, plan } = readArgs();
const client = new Client({ name: "remember-sync-conformance", version: "1.0.0" });
const transport = new StreamableHTTPClientTransport(url, { requestInit: { headers } });
try {
  await client.connect(transport);
  emit({ op: "connect", protocolVersion: transport.protocolVersion ?? null,
         sessionId: Boolean(transport.sessionId), server: client.getServerVersion()?.name ?? null });
  await runSteps(client, plan.steps);
} catch (error) {
  emit({ op: "connect", error: describe(error) });
} finally {
  await client.close();
}
