// The Vercel AI SDK's Open Responses provider against a harmonia server (run by
// tests/serve/test_serve_third_party.py from a folder where `ai`, `@ai-sdk/open-responses`
// and `zod` are installed). Usage: node ai_sdk_client.mjs http://127.0.0.1:PORT/v1 MODEL
// Prints one JSON object: what each of the three runs saw.
import { createOpenResponses } from "@ai-sdk/open-responses";
import { generateText, stepCountIs, streamText, tool } from "ai";
import { z } from "zod";

const [base, modelName] = process.argv.slice(2);
const provider = createOpenResponses({ name: "harmonia", url: `${base}/responses` });
const model = provider(modelName);

const generated = await generateText({ model, prompt: "Capital of France?" });

const streamed = streamText({ model, prompt: "Say hello." });
const pieces = [];
for await (const piece of streamed.textStream) pieces.push(piece);

const calls = [];
const withTool = await generateText({
  model,
  prompt: "Weather in Paris?",
  tools: {
    get_weather: tool({
      description: "Gets the weather in a city.",
      inputSchema: z.object({ city: z.string() }),
      execute: async ({ city }) => {
        calls.push(city);
        return `Sunny in ${city}, 21 C`;
      },
    }),
  },
  stopWhen: stepCountIs(3),
});

console.log(
  JSON.stringify({
    generated: { text: generated.text, finishReason: generated.finishReason },
    streamed: { pieces, text: await streamed.text, finishReason: await streamed.finishReason },
    tool: { calls, text: withTool.text, steps: withTool.steps.length },
  }),
);
