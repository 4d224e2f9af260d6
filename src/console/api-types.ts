// Generated from the OpenAPI document (/docs/json) by `bun run console-types`: do not edit.
// The console imports its types of the API's objects from here (src/console/types.ts).
/* eslint-disable */
export interface paths {
    "/v1/documents/{document_id}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** A document's status: { id, status, chunks_count, indexed_at } (the list shows its error when failed) */
        get: operations["getDocument"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/knowledge-bases/{id}/search": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Search a knowledge base: vector, full-text or hybrid per its retrieval mode; filters on metadata; optional rerank. Retrieval only, no generation. */
        post: operations["searchKnowledgeBase"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/machines": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** List the state machines with their states, transitions and Mermaid diagrams */
        get: operations["listMachines"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/runs/{run_id}/events": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * The run's stored event log; with Accept: text/event-stream a live stream resuming after Last-Event-ID
         * @description The stream replays the stored events after Last-Event-ID, then follows the live ones while the run runs, and ends after done. Reconnecting once done was received answers 204 No Content.
         */
        get: operations["streamRun"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/runs/{run_id}/nodes": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Every node of the run with its state now (pending, running, retrying, waiting, completed, failed, skipped)
         * @description With the graph of the workflow version the run runs, so a client can draw it. Poll it, or follow GET /v1/runs/{run_id}/events for each change.
         */
        get: operations["listRunNodes"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/workflows/{id}/triggers": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** List a workflow's triggers (never their secrets) */
        get: operations["listTriggers"];
        put?: never;
        /**
         * Add a schedule or webhook trigger to a workflow (developer)
         * @description schedule: a run at each tick of `cron` (5 fields) in `timezone`, as user_id schedule:<trigger id>; each tick runs once across every process, and ticks missed while nothing ran are not replayed. webhook: a run per POST to the answered `url`, its inputs rendered from the call; with a secret, calls must be signed. A bad cron or time zone is a 400 naming it. See docs/triggers.md.
         */
        post: operations["createTrigger"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/workspaces/{id}/usage": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** Credits and tokens used, by model and by UTC day, with the budget of the current period */
        get: operations["getUsage"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
}
export type webhooks = Record<string, never>;
export interface components {
    schemas: {
        Agent: {
            /**
             * Format: date-time
             * @description ISO 8601 UTC with milliseconds and Z
             * @example 2026-01-02T03:04:05.678Z
             */
            created_at: string;
            id: string;
            instructions: string;
            knowledge_base_ids: string[];
            model: string;
            name: string;
            /**
             * @default active
             * @enum {string}
             */
            status: "active" | "disabled";
            tools: ({
                description?: string;
                /** @description The name the model calls it by (letters, digits, _ and -) */
                name?: string;
                /** @constant */
                type: "knowledge_search";
            } | {
                description?: string;
                /** @description The name the model calls it by (letters, digits, _ and -) */
                name?: string;
                /** @constant */
                type: "workflow";
                /**
                 * @description The workflow run as the tool; its start inputs are the tool's parameters
                 * @example wf_01jbz3k9x8q7r6s5t4v3w2y1z0
                 */
                workflow_id: string;
            } | {
                description: string;
                /**
                 * @default GET
                 * @enum {string}
                 */
                method: "GET" | "POST" | "PUT" | "PATCH" | "DELETE";
                /** @description The name the model calls it by (letters, digits, _ and -) */
                name: string;
                /** @description JSON schema (type "object") of the arguments */
                parameters: {
                    [key: string]: unknown;
                };
                /** @constant */
                type: "http";
                /** @description https URL; {param} placeholders take that argument, the other arguments go in the query (GET, DELETE) or a JSON body */
                url: string;
            } | {
                /** @description Only these of the server's tools (their names on the server, without prefix) are offered; omitted: all */
                allowed_tools?: string[];
                /**
                 * @description Sent with every request to the server (e.g. Authorization). Values are encrypted at rest and never answered: answers show "***" for each. Sending "***" or null keeps the value stored for that header by the tool of the same name and server_url
                 * @example {
                 *       "Authorization": "Bearer crm-token"
                 *     }
                 */
                headers?: {
                    [key: string]: string | null;
                };
                /** @description The server's name: its tools are offered as <name>__<tool> (e.g. crm__lookup) */
                name: string;
                /** @description The MCP server's Streamable HTTP endpoint; https, under the webhook SSRF rules (checked here, and resolved and pinned at each connection) */
                server_url: string;
                /** @constant */
                type: "mcp";
            })[];
            /**
             * @default agent
             * @enum {string}
             */
            type: "agent" | "chatflow";
            /**
             * Format: date-time
             * @description ISO 8601 UTC with milliseconds and Z
             * @example 2026-01-02T03:04:05.678Z
             */
            updated_at: string;
            version: number;
            workflow_id: string | null;
            workspace_id: string;
        };
        ApiKey: {
            /**
             * Format: date-time
             * @description ISO 8601 UTC with milliseconds and Z
             * @example 2026-01-02T03:04:05.678Z
             */
            created_at: string;
            /**
             * Format: date-time
             * @description ISO 8601 UTC with milliseconds and Z
             * @example 2026-01-02T03:04:05.678Z
             */
            expires_at: string | null;
            id: string;
            /** @description The user who issued the key (user_id itself, an admin of its workspace, or "root"); null for the bootstrap root key */
            issued_by: string | null;
            /**
             * Format: date-time
             * @description ISO 8601 UTC with milliseconds and Z
             * @example 2026-01-02T03:04:05.678Z
             */
            last_used_at: string | null;
            name: string;
            /** @description The first characters of the key, to tell keys apart */
            prefix: string;
            /**
             * Format: date-time
             * @description ISO 8601 UTC with milliseconds and Z
             * @example 2026-01-02T03:04:05.678Z
             */
            revoked_at: string | null;
            /**
             * @description admin = workspace administrator, developer = application builder, user = ordinary user, readonly = read only
             * @enum {string|null}
             */
            role_limit: "admin" | "developer" | "user" | "readonly" | null;
            root: boolean;
            user_id: string;
            workspace_id: string | null;
        };
        /**
         * @description One write made through the API
         * @example {
         *       "id": "aud_01jbz3k9x8q7r6s5t4v3w2y1z0",
         *       "workspace_id": "ws_01jbz3k9x8q7r6s5t4v3w2y1z0",
         *       "user_id": "user_42",
         *       "api_key_id": "key_01jbz3k9x8q7r6s5t4v3w2y1z0",
         *       "issued_by": "user_7",
         *       "action": "POST /v1/workspaces/{id}/members",
         *       "resource_id": "user_43",
         *       "params": {
         *         "id": "ws_01jbz3k9x8q7r6s5t4v3w2y1z0"
         *       },
         *       "status": 201,
         *       "request_id": "req_01jbz3k9x8q7r6s5t4v3w2y1z0",
         *       "created_at": "2026-01-02T03:04:05.678Z"
         *     }
         */
        AuditEntry: {
            /** @description What: "<METHOD> <route>", e.g. "POST /v1/workspaces/{id}/members" */
            action: string;
            /** @description The API key used (its id, never the key) */
            api_key_id: string;
            /**
             * Format: date-time
             * @description ISO 8601 UTC with milliseconds and Z
             * @example 2026-01-02T03:04:05.678Z
             */
            created_at: string;
            id: string;
            /** @description The user who issued that key: user_id itself for a key of its own, an admin or the root user ("root") for a key issued to user_id; null for the bootstrap root key */
            issued_by: string | null;
            /** @description The path parameters of the request */
            params: {
                [key: string]: string;
            };
            /** @description The request id (X-Request-Id), to find the request in the logs */
            request_id: string;
            /** @description The resource created or acted on */
            resource_id: string | null;
            /** @description The HTTP status of the answer */
            status: number;
            /** @description Who: the user_id of the API key that made the write */
            user_id: string;
            workspace_id: string;
        };
        Budget: {
            credits: number;
            hard_limit: boolean;
            /** @constant */
            period: "month";
            thresholds: number[];
            /**
             * Format: date-time
             * @description ISO 8601 UTC with milliseconds and Z
             * @example 2026-01-02T03:04:05.678Z
             */
            updated_at: string;
            workspace_id: string;
        };
        /** @description The synchronous chat answer */
        ChatAnswer: {
            agent_id: string;
            conversation_id: string;
            message: {
                content: string;
                role: string;
            };
            request_id: string;
            tool_calls: {
                duration_ms: number;
                input: {
                    [key: string]: unknown;
                };
                tool: string;
            }[];
            usage: {
                credits: number;
                tokens_in: number;
                tokens_out: number;
            };
        };
        /** @description OpenAI chat.completion plus request_id and usage.credits; with stream: true, text/event-stream of chat.completion.chunk objects ending with data: [DONE] */
        ChatCompletion: {
            choices: {
                finish_reason: string | null;
                index: number;
                /** @description With logprobs: true, as the provider sent them */
                logprobs?: {
                    [key: string]: unknown;
                } | null;
                message: {
                    [key: string]: unknown;
                };
            }[];
            created: number;
            id: string;
            model: string;
            /** @constant */
            object: "chat.completion";
            request_id: string;
            service_tier?: string | null;
            system_fingerprint?: string | null;
            usage: {
                completion_tokens: number;
                /** @description As the provider reported it (cached, reasoning and audio tokens...) */
                completion_tokens_details?: {
                    [key: string]: unknown;
                };
                credits: number;
                prompt_tokens: number;
                /** @description As the provider reported it (cached, reasoning and audio tokens...) */
                prompt_tokens_details?: {
                    [key: string]: unknown;
                };
                total_tokens: number;
            };
        };
        Conversation: {
            agent_id: string;
            /**
             * Format: date-time
             * @description ISO 8601 UTC with milliseconds and Z
             * @example 2026-01-02T03:04:05.678Z
             */
            created_at: string;
            id: string;
            message_count: number;
            /** @description The first message, cut to 80 characters */
            title: string;
            /**
             * Format: date-time
             * @description ISO 8601 UTC with milliseconds and Z
             * @example 2026-01-02T03:04:05.678Z
             */
            updated_at: string;
            user_id: string;
        };
        /**
         * @example {
         *       "id": "dlv_01jbz3k9x8q7r6s5t4v3w2y1z0",
         *       "webhook_id": "whk_01jbz3k9x8q7r6s5t4v3w2y1z0",
         *       "event_id": "evt_01jbz3k9x8q7r6s5t4v3w2y1z0",
         *       "event": "webhook.test",
         *       "status": "succeeded",
         *       "attempts_count": 1,
         *       "attempts": [
         *         {
         *           "attempt": 1,
         *           "at": "2026-01-02T03:04:05.678Z",
         *           "status_code": 200,
         *           "duration_ms": 41,
         *           "error": null,
         *           "response_excerpt": "{\"ok\":true}"
         *         }
         *       ],
         *       "next_attempt_at": null,
         *       "data": {
         *         "webhook_id": "whk_01jbz3k9x8q7r6s5t4v3w2y1z0",
         *         "message": "This is a test event sent by the ping endpoint."
         *       },
         *       "created_at": "2026-01-02T03:04:05.678Z",
         *       "updated_at": "2026-01-02T03:04:05.719Z"
         *     }
         */
        Delivery: {
            attempts: {
                /**
                 * Format: date-time
                 * @description ISO 8601 UTC with milliseconds and Z
                 * @example 2026-01-02T03:04:05.678Z
                 */
                at: string;
                /** @description Counts over the delivery's life, redeliveries included */
                attempt: number;
                duration_ms: number;
                error: string | null;
                /** @description The start of the receiver's answer, at most 1 KiB */
                response_excerpt: string | null;
                /** @description The receiver's HTTP status; null when none came (time-out, network error) */
                status_code: number | null;
            }[];
            attempts_count: number;
            /**
             * Format: date-time
             * @description ISO 8601 UTC with milliseconds and Z
             * @example 2026-01-02T03:04:05.678Z
             */
            created_at: string;
            /** @description The event data sent */
            data: {
                [key: string]: unknown;
            };
            event: string;
            event_id: string;
            /** @description Sent as X-Service-Delivery-Id and webhook-id, the same on every retry and redelivery */
            id: string;
            /**
             * Format: date-time
             * @description ISO 8601 UTC with milliseconds and Z
             * @example 2026-01-02T03:04:05.678Z
             */
            next_attempt_at: string | null;
            /**
             * @default pending
             * @enum {string}
             */
            status: "pending" | "retrying" | "succeeded" | "failed";
            /**
             * Format: date-time
             * @description ISO 8601 UTC with milliseconds and Z
             * @example 2026-01-02T03:04:05.678Z
             */
            updated_at: string;
            webhook_id: string;
        };
        Document: {
            chunks_count: number;
            /**
             * Format: date-time
             * @description ISO 8601 UTC with milliseconds and Z
             * @example 2026-01-02T03:04:05.678Z
             */
            created_at: string;
            error: {
                /**
                 * @description empty_document, parse_error, unsupported_type, embedding_failed, budget_exceeded, ingestion_failed, original_missing, storage_unavailable, processing_timeout (parsing and chunking over 60 s), processing_memory (over 640 MiB), too_many_chunks (over 20 000), poison_document (reading it never finished three times); docs/knowledge.md "Statuses"
                 * @example parse_error
                 */
                code: string;
                message: string;
            } | null;
            group: string | null;
            id: string;
            /**
             * Format: date-time
             * @description ISO 8601 UTC with milliseconds and Z
             * @example 2026-01-02T03:04:05.678Z
             */
            indexed_at: string | null;
            knowledge_base_id: string;
            metadata: {
                [key: string]: unknown;
            };
            name: string;
            size_bytes: number;
            /**
             * @default uploading
             * @enum {string}
             */
            status: "uploading" | "parsing" | "chunking" | "embedding" | "ready" | "failed";
            /** @description txt, md, html, pdf, docx, csv or json */
            type: string;
            /**
             * Format: date-time
             * @description ISO 8601 UTC with milliseconds and Z
             * @example 2026-01-02T03:04:05.678Z
             */
            updated_at: string;
        };
        /** @description The document's status */
        DocumentStatus: {
            /** @description Chunks searchable now */
            chunks_count: number;
            id: string;
            /**
             * Format: date-time
             * @description ISO 8601 UTC with milliseconds and Z
             * @example 2026-01-02T03:04:05.678Z
             */
            indexed_at: string | null;
            /**
             * @description Request id, also in the X-Request-Id header
             * @example req_01jbz3k9x8q7r6s5t4v3w2y1z0
             */
            request_id: string;
            /**
             * @default uploading
             * @enum {string}
             */
            status: "uploading" | "parsing" | "chunking" | "embedding" | "ready" | "failed";
        };
        /**
         * @description Error
         * @example {
         *       "request_id": "req_01jbz3k9x8q7r6s5t4v3w2y1z0",
         *       "error": {
         *         "code": "not_found",
         *         "message": "workspace ws_01jbz3k9x8q7r6s5t4v3w2y1z0 not found"
         *       }
         *     }
         */
        Error: {
            error: {
                /** @enum {string} */
                code: "invalid_json" | "validation_error" | "invalid_cursor" | "invalid_sort" | "invalid_filter" | "unauthenticated" | "budget_exceeded" | "forbidden" | "not_found" | "method_not_allowed" | "run_not_running" | "run_not_waiting" | "idempotency_key_in_use" | "conflict" | "payload_too_large" | "unsupported_media_type" | "idempotency_key_reused" | "rate_limited" | "internal_error" | "upstream_error" | "unavailable" | "upstream_timeout";
                details?: {
                    message: string;
                    path: string;
                }[];
                message: string;
                param?: string;
            };
            /**
             * @description Request id, also in the X-Request-Id header
             * @example req_01jbz3k9x8q7r6s5t4v3w2y1z0
             */
            request_id: string;
        };
        /**
         * @description The workflow graph (docs/workflows.md)
         * @example {
         *       "nodes": [
         *         {
         *           "id": "start",
         *           "type": "start",
         *           "config": {
         *             "inputs": [
         *               {
         *                 "name": "question",
         *                 "type": "string",
         *                 "required": true
         *               }
         *             ]
         *           }
         *         },
         *         {
         *           "id": "answer",
         *           "type": "llm",
         *           "config": {
         *             "model": "gpt-4o-mini",
         *             "messages": [
         *               {
         *                 "role": "user",
         *                 "content": "{{inputs.question}}"
         *               }
         *             ],
         *             "temperature": 0.2
         *           }
         *         },
         *         {
         *           "id": "end",
         *           "type": "end",
         *           "config": {
         *             "outputs": {
         *               "answer": "{{nodes.answer.output.text}}"
         *             }
         *           }
         *         }
         *       ],
         *       "edges": [
         *         {
         *           "source": "start",
         *           "target": "answer"
         *         },
         *         {
         *           "source": "answer",
         *           "target": "end"
         *         }
         *       ]
         *     }
         */
        Graph: {
            /** @description At most 2000 edges; no cycles; every node reachable from start and reaching an end */
            edges: {
                /** @description Node id the edge leaves */
                source: string;
                /** @description Edges leaving a condition node only: the case id (or "default") that takes this edge */
                source_handle?: string;
                /** @description Node id the edge enters */
                target: string;
            }[];
            /** @description At most 500 nodes: exactly one start, at least one end */
            nodes: {
                /** @description Per node type (docs/workflows.md, "Node types") */
                config: {
                    [key: string]: unknown;
                };
                /**
                 * @description 1-64 characters of A-Z, a-z, 0-9, _ and -, unique in the graph
                 * @example classify
                 */
                id: string;
                /** @description A label for people (at most 200 characters) */
                name?: string;
                /**
                 * @description One of: start, llm, template, condition, code, http_request, knowledge_retrieval, wait, sub_workflow, iteration, human_input, agent, end
                 * @example llm
                 */
                type: string;
            }[];
        };
        KnowledgeBase: {
            /** @description Applies to uploads and re-parses from now on */
            chunking: {
                /**
                 * @description Tokens shared by consecutive chunks of a section; less than chunk_size / 2
                 * @example 32
                 */
                chunk_overlap: number;
                /**
                 * @description Tokens per chunk at most (o200k tokenizer)
                 * @example 256
                 */
                chunk_size: number;
                /** @description Where an over-long paragraph is split, tried in order; "" splits anywhere. Default: paragraph, line, sentence, clause, word */
                separators?: string[];
            };
            /**
             * Format: date-time
             * @description ISO 8601 UTC with milliseconds and Z
             * @example 2026-01-02T03:04:05.678Z
             */
            created_at: string;
            created_by: string;
            description: string;
            dimensions: number;
            embedding_model: string;
            id: string;
            name: string;
            rerank_model: string;
            retrieval: {
                /**
                 * @description hybrid: reciprocal rank fusion of vector and full-text results
                 * @default vector
                 * @enum {string}
                 */
                mode: "vector" | "hybrid" | "fulltext";
            };
            /**
             * Format: date-time
             * @description ISO 8601 UTC with milliseconds and Z
             * @example 2026-01-02T03:04:05.678Z
             */
            updated_at: string;
            workspace_id: string;
        };
        Member: {
            /**
             * Format: date-time
             * @description ISO 8601 UTC with milliseconds and Z
             * @example 2026-01-02T03:04:05.678Z
             */
            created_at: string;
            is_owner: boolean;
            /**
             * @description admin = workspace administrator, developer = application builder, user = ordinary user, readonly = read only
             * @enum {string}
             */
            role: "admin" | "developer" | "user" | "readonly";
            /**
             * Format: date-time
             * @description ISO 8601 UTC with milliseconds and Z
             * @example 2026-01-02T03:04:05.678Z
             */
            updated_at: string;
            user_id: string;
            workspace_id: string;
        };
        Message: {
            agent_version: number | null;
            content: string;
            /**
             * Format: date-time
             * @description ISO 8601 UTC with milliseconds and Z
             * @example 2026-01-02T03:04:05.678Z
             */
            created_at: string;
            /** @description stop, length, error (the turn failed) or client_closed (the stream's client left); null for user messages */
            finish_reason: string | null;
            id: string;
            /**
             * @default user
             * @enum {string}
             */
            role: "user" | "assistant";
            /** @description The run that answered (chatflow) */
            run_id: string | null;
            tool_calls: {
                duration_ms: number;
                input: {
                    [key: string]: unknown;
                };
                output: {
                    [key: string]: unknown;
                };
                tool: string;
            }[];
            usage: {
                credits: number;
                tokens_in: number;
                tokens_out: number;
            } | null;
        };
        Model: {
            context_length?: number;
            /** @description Unix seconds: when this process loaded its catalogue (OpenAI's field; the catalogue keeps no date) */
            created: number;
            dimensions?: number;
            id: string;
            /** @constant */
            object: "model";
            /** @description The vendor, as OpenAI's field */
            owned_by: string;
            supports_function_call?: boolean;
            /**
             * @default llm
             * @enum {string}
             */
            type: "llm" | "embedding" | "rerank";
            vendor: string;
        };
        Run: {
            /**
             * Format: date-time
             * @description ISO 8601 UTC with milliseconds and Z
             * @example 2026-01-02T03:04:05.678Z
             */
            created_at: string;
            duration_ms: number | null;
            error?: {
                code: string;
                message: string;
                node: string | null;
            };
            /**
             * Format: date-time
             * @description ISO 8601 UTC with milliseconds and Z
             * @example 2026-01-02T03:04:05.678Z
             */
            finished_at: string | null;
            inputs: {
                [key: string]: unknown;
            };
            outputs: {
                [key: string]: unknown;
            };
            /** @description The run whose sub_workflow or iteration node started this one; null for a run started by a caller, a schedule or a hook */
            parent_run_id: string | null;
            run_id: string;
            /**
             * @default running
             * @enum {string}
             */
            status: "running" | "completed" | "failed" | "cancelled";
            usage: {
                credits: number;
                tokens_in: number;
                tokens_out: number;
            };
            user_id: string | null;
            /** @description What a running run waits on (a human_input node), else null */
            waiting: {
                /**
                 * Format: date-time
                 * @description ISO 8601 UTC with milliseconds and Z
                 * @example 2026-01-02T03:04:05.678Z
                 */
                expires_at: string | null;
                /** @description The id of the node waiting */
                node: string;
                /** @description What the person is asked, rendered from the node's prompt template */
                prompt: string;
                /** @description The JSON Schema the data must match (null: any JSON value) */
                schema: {
                    [key: string]: unknown;
                } | null;
                /**
                 * Format: date-time
                 * @description ISO 8601 UTC with milliseconds and Z
                 * @example 2026-01-02T03:04:05.678Z
                 */
                since: string;
            } | null;
            workflow_id: string;
            workflow_version: number;
        };
        /**
         * @description A webhook; its secret is never returned
         * @example {
         *       "id": "whk_01jbz3k9x8q7r6s5t4v3w2y1z0",
         *       "workspace_id": "ws_01jbz3k9x8q7r6s5t4v3w2y1z0",
         *       "url": "https://example.com/hooks/agent-platform",
         *       "events": [
         *         "workflow.run.completed"
         *       ],
         *       "enabled": true,
         *       "disabled_reason": null,
         *       "previous_secret_expires_at": null,
         *       "created_by": "user_42",
         *       "created_at": "2026-01-02T03:04:05.678Z",
         *       "updated_at": "2026-01-02T03:04:05.678Z"
         *     }
         */
        Webhook: {
            /**
             * Format: date-time
             * @description ISO 8601 UTC with milliseconds and Z
             * @example 2026-01-02T03:04:05.678Z
             */
            created_at: string;
            created_by: string;
            /** @description Why it was disabled automatically, if it was */
            disabled_reason: string | null;
            enabled: boolean;
            events: string[];
            id: string;
            /**
             * Format: date-time
             * @description ISO 8601 UTC with milliseconds and Z
             * @example 2026-01-02T03:04:05.678Z
             */
            previous_secret_expires_at: string | null;
            /**
             * Format: date-time
             * @description ISO 8601 UTC with milliseconds and Z
             * @example 2026-01-02T03:04:05.678Z
             */
            updated_at: string;
            url: string;
            workspace_id: string;
        };
        /**
         * @example {
         *       "id": "wf_01jbz3k9x8q7r6s5t4v3w2y1z0",
         *       "workspace_id": "ws_01jbz3k9x8q7r6s5t4v3w2y1z0",
         *       "name": "Answer a question",
         *       "description": "One LLM call",
         *       "graph": {
         *         "nodes": [
         *           {
         *             "id": "start",
         *             "type": "start",
         *             "config": {
         *               "inputs": [
         *                 {
         *                   "name": "question",
         *                   "type": "string",
         *                   "required": true
         *                 }
         *               ]
         *             }
         *           },
         *           {
         *             "id": "answer",
         *             "type": "llm",
         *             "config": {
         *               "model": "gpt-4o-mini",
         *               "messages": [
         *                 {
         *                   "role": "user",
         *                   "content": "{{inputs.question}}"
         *                 }
         *               ],
         *               "temperature": 0.2
         *             }
         *           },
         *           {
         *             "id": "end",
         *             "type": "end",
         *             "config": {
         *               "outputs": {
         *                 "answer": "{{nodes.answer.output.text}}"
         *               }
         *             }
         *           }
         *         ],
         *         "edges": [
         *           {
         *             "source": "start",
         *             "target": "answer"
         *           },
         *           {
         *             "source": "answer",
         *             "target": "end"
         *           }
         *         ]
         *       },
         *       "version": 1,
         *       "created_by": "user_42",
         *       "created_at": "2026-01-02T03:04:05.678Z",
         *       "updated_at": "2026-01-02T03:04:05.678Z"
         *     }
         */
        Workflow: {
            /**
             * Format: date-time
             * @description ISO 8601 UTC with milliseconds and Z
             * @example 2026-01-02T03:04:05.678Z
             */
            created_at: string;
            created_by: string;
            description: string;
            graph: components["schemas"]["Graph"];
            id: string;
            name: string;
            /**
             * Format: date-time
             * @description ISO 8601 UTC with milliseconds and Z
             * @example 2026-01-02T03:04:05.678Z
             */
            updated_at: string;
            /** @description 1 at creation, +1 at every PUT; a run records the version it ran */
            version: number;
            workspace_id: string;
        };
        Workspace: {
            /**
             * Format: date-time
             * @description ISO 8601 UTC with milliseconds and Z
             * @example 2026-01-02T03:04:05.678Z
             */
            archived_at: string | null;
            /**
             * Format: date-time
             * @description ISO 8601 UTC with milliseconds and Z
             * @example 2026-01-02T03:04:05.678Z
             */
            created_at: string;
            description: string;
            id: string;
            join_policy: string;
            member_count: number;
            name: string;
            owner_id: string;
            /** @enum {string} */
            status: "active" | "archived";
            type: string;
            /**
             * Format: date-time
             * @description ISO 8601 UTC with milliseconds and Z
             * @example 2026-01-02T03:04:05.678Z
             */
            updated_at: string;
        };
    };
    responses: never;
    parameters: never;
    requestBodies: never;
    headers: never;
    pathItems: never;
}
export type $defs = Record<string, never>;
export interface operations {
    getDocument: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                document_id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The document's status */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["DocumentStatus"];
                };
            };
            /** @description The request is malformed: a field, the JSON, a cursor, a sort or a filter (param names it). error.code: invalid_json, validation_error, invalid_cursor, invalid_sort, invalid_filter */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description No API key, or one that is unknown, revoked or expired. error.code: unauthenticated */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description Not found, or not visible to this key. error.code: not_found */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description Too many requests: retry after Retry-After seconds. error.code: rate_limited */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description An internal error, logged with the request_id: quote it when reporting it. error.code: internal_error */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description The database or Redis is unreachable, or the service is shutting down: retry after Retry-After seconds. error.code: unavailable */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
        };
    };
    searchKnowledgeBase: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": {
                    /** @description Metadata key → value (exact), or → array of values (any of) */
                    filters?: {
                        [key: string]: unknown;
                    };
                    query: string;
                    /** @description Rerank a wider candidate pool with the base's rerank model; score is then the rerank score */
                    rerank?: boolean;
                    /** @description Default 5; large values add noise */
                    top_k?: number;
                };
            };
        };
        responses: {
            /** @description The passages found, best first */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        /**
                         * @description Request id, also in the X-Request-Id header
                         * @example req_01jbz3k9x8q7r6s5t4v3w2y1z0
                         */
                        request_id: string;
                        results: {
                            chunk_id: string;
                            content: string;
                            document_id: string;
                            document_name: string;
                            metadata: {
                                [key: string]: unknown;
                            };
                            /** @description The number the results are ordered by (descending), in [0, 1]: cosine similarity in vector mode, the normalised fused rank in hybrid and full-text modes, the rerank score with rerank: true */
                            score: number;
                            /** @description Cosine similarity to the query in [0, 1], in every mode */
                            similarity: number;
                        }[];
                    };
                };
            };
            /** @description The request is malformed: a field, the JSON, a cursor, a sort or a filter (param names it). error.code: invalid_json, validation_error, invalid_cursor, invalid_sort, invalid_filter */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description No API key, or one that is unknown, revoked or expired. error.code: unauthenticated */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description The workspace's credit budget is spent for this period. error.code: budget_exceeded */
            402: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description Not found, or not visible to this key. error.code: not_found */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description Understood but refused: a rule of the resource, or an Idempotency-Key reused with another request. error.code: idempotency_key_reused */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description Too many requests: retry after Retry-After seconds. error.code: rate_limited */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description An internal error, logged with the request_id: quote it when reporting it. error.code: internal_error */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description The database or Redis is unreachable, or the service is shutting down: retry after Retry-After seconds. error.code: unavailable */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
        };
    };
    listMachines: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Every state machine */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        data: {
                            /** @description Delays of its after transitions: milliseconds, or the delay's name */
                            delays: string[];
                            description: string | null;
                            /** @description Event types the machine accepts, sorted */
                            events: string[];
                            final_states: string[];
                            /** @description Guard names its transitions use, sorted */
                            guards: string[];
                            /** @description The initial state; null when the root is parallel */
                            initial: string | null;
                            /** @description The diagram as Mermaid stateDiagram-v2 text (docs/machines/<name>.md shows it rendered) */
                            mermaid: string;
                            /** @description The machine's name: kebab-case, also its id */
                            name: string;
                            states: {
                                description?: string;
                                /** @description Entry action names (inline ones as inline:<n>) */
                                entry: string[];
                                /** @description Exit action names (inline ones as inline:<n>) */
                                exit: string[];
                                /** @description A final state: the machine (or its parent state) is done there */
                                final: boolean;
                                /** @enum {string} */
                                history?: "shallow" | "deep";
                                /** @description Dot path from the machine root, e.g. running.waiting */
                                name: string;
                                /** @description State tags, e.g. settled */
                                tags: string[];
                                /** @enum {string} */
                                type: "atomic" | "compound" | "parallel" | "final" | "history";
                            }[];
                            transitions: {
                                /** @description Action names, in order */
                                actions: string[];
                                description?: string;
                                /** @description Event type; "after <delay>" for a delayed transition, "always" for an eventless one, "onDone" when a compound state is done */
                                event: string;
                                /** @description Guard name; and(...), or(...), not(...) for combined guards, inline:<n> for inline ones */
                                guard?: string;
                                /** @description The state that handles the event; (machine) for the machine's own handlers */
                                source: string;
                                /** @description Target state (several joined by ", "); null for a transition that only runs actions */
                                target: string | null;
                            }[];
                            /** @description Stored beside every persisted snapshot; bumped when a change would misread old snapshots */
                            version: number;
                        }[];
                        meta: {
                            deprecated_warnings: string[];
                            /** @constant */
                            version: "v1";
                        };
                        /**
                         * @description Request id, also in the X-Request-Id header
                         * @example req_01jbz3k9x8q7r6s5t4v3w2y1z0
                         */
                        request_id: string;
                    };
                };
            };
            /** @description The request is malformed: a field, the JSON, a cursor, a sort or a filter (param names it). error.code: invalid_json, validation_error, invalid_cursor, invalid_sort, invalid_filter */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description No API key, or one that is unknown, revoked or expired. error.code: unauthenticated */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description Too many requests: retry after Retry-After seconds. error.code: rate_limited */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description An internal error, logged with the request_id: quote it when reporting it. error.code: internal_error */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description The database or Redis is unreachable, or the service is shutting down: retry after Retry-After seconds. error.code: unavailable */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
        };
    };
    streamRun: {
        parameters: {
            query?: {
                after?: string;
            };
            header?: never;
            path: {
                run_id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The run's stored events (JSON), or with Accept: text/event-stream its live stream */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        data: {
                            /**
                             * Format: date-time
                             * @description ISO 8601 UTC with milliseconds and Z
                             * @example 2026-01-02T03:04:05.678Z
                             */
                            created_at: string;
                            data: {
                                [key: string]: unknown;
                            };
                            event: string;
                            seq: number;
                        }[];
                        request_id: string;
                    };
                    "text/event-stream": {
                        /** @description A line of JSON of the shape contentSchema */
                        data: string;
                        /** @constant */
                        event: "node_start";
                        /** @description The event's sequence number in the run: send it back as Last-Event-ID (or ?after=) to resume after it */
                        id: string;
                    } | {
                        /** @description A line of JSON of the shape contentSchema */
                        data: string;
                        /** @constant */
                        event: "node_end";
                        /** @description The event's sequence number in the run: send it back as Last-Event-ID (or ?after=) to resume after it */
                        id: string;
                    } | {
                        /** @description A line of JSON of the shape contentSchema */
                        data: string;
                        /** @constant */
                        event: "message";
                        /** @description The event's sequence number in the run: send it back as Last-Event-ID (or ?after=) to resume after it */
                        id: string;
                    } | {
                        /** @description A line of JSON of the shape contentSchema */
                        data: string;
                        /** @constant */
                        event: "usage";
                        /** @description The event's sequence number in the run: send it back as Last-Event-ID (or ?after=) to resume after it */
                        id: string;
                    } | {
                        /** @description A line of JSON of the shape contentSchema */
                        data: string;
                        /** @constant */
                        event: "done";
                        /** @description The event's sequence number in the run: send it back as Last-Event-ID (or ?after=) to resume after it */
                        id: string;
                    };
                };
            };
            /** @description With Accept: text/event-stream only: the run has ended and Last-Event-ID (or after) is at or past its last event (done); nothing more will come, and an EventSource stops reconnecting */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            /** @description The request is malformed: a field, the JSON, a cursor, a sort or a filter (param names it). error.code: invalid_json, validation_error, invalid_cursor, invalid_sort, invalid_filter */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description No API key, or one that is unknown, revoked or expired. error.code: unauthenticated */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description Not found, or not visible to this key. error.code: not_found */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description Too many requests: retry after Retry-After seconds. error.code: rate_limited */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description An internal error, logged with the request_id: quote it when reporting it. error.code: internal_error */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description The database or Redis is unreachable, or the service is shutting down: retry after Retry-After seconds. error.code: unavailable */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
        };
    };
    listRunNodes: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                run_id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Every node of the run with its state, and the graph */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        data: {
                            /** @description The attempt in flight, or the next one while retrying */
                            attempt: number | null;
                            duration_ms: number | null;
                            /** @description The last failed attempt's error */
                            error: {
                                code: string;
                                message: string;
                            } | null;
                            name: string | null;
                            /** @description The node's id */
                            node: string;
                            /**
                             * Format: date-time
                             * @description ISO 8601 UTC with milliseconds and Z
                             * @example 2026-01-02T03:04:05.678Z
                             */
                            started_at: string | null;
                            /**
                             * @description pending: not started yet; skipped: on a branch not taken (or never reached by a run that completed or failed); cancelled: not ended (pending, running, retrying or waiting) when its run was cancelled
                             * @default pending
                             * @enum {string}
                             */
                            state: "pending" | "running" | "retrying" | "waiting" | "completed" | "failed" | "skipped" | "cancelled";
                            type: string;
                            /**
                             * Format: date-time
                             * @description ISO 8601 UTC with milliseconds and Z
                             * @example 2026-01-02T03:04:05.678Z
                             */
                            until: string | null;
                        }[];
                        /** @description The graph of the workflow version the run runs */
                        graph: {
                            edges: {
                                [key: string]: unknown;
                            }[];
                            nodes: {
                                [key: string]: unknown;
                            }[];
                        };
                        /**
                         * @description Request id, also in the X-Request-Id header
                         * @example req_01jbz3k9x8q7r6s5t4v3w2y1z0
                         */
                        request_id: string;
                    };
                };
            };
            /** @description The request is malformed: a field, the JSON, a cursor, a sort or a filter (param names it). error.code: invalid_json, validation_error, invalid_cursor, invalid_sort, invalid_filter */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description No API key, or one that is unknown, revoked or expired. error.code: unauthenticated */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description Not found, or not visible to this key. error.code: not_found */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description Too many requests: retry after Retry-After seconds. error.code: rate_limited */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description An internal error, logged with the request_id: quote it when reporting it. error.code: internal_error */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description The database or Redis is unreachable, or the service is shutting down: retry after Retry-After seconds. error.code: unavailable */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
        };
    };
    listTriggers: {
        parameters: {
            query?: {
                cursor?: string;
                limit?: number;
                sort?: string;
                type?: string;
            };
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description A page of the workflow's triggers */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        data: {
                            /**
                             * Format: date-time
                             * @description ISO 8601 UTC with milliseconds and Z
                             * @example 2026-01-02T03:04:05.678Z
                             */
                            created_at: string;
                            /** @description Schedules only */
                            cron: string | null;
                            enabled: boolean;
                            id: string;
                            inputs: {
                                [key: string]: unknown;
                            };
                            /**
                             * Format: date-time
                             * @description ISO 8601 UTC with milliseconds and Z
                             * @example 2026-01-02T03:04:05.678Z
                             */
                            last_run_at: string | null;
                            last_run_id: string | null;
                            /**
                             * Format: date-time
                             * @description ISO 8601 UTC with milliseconds and Z
                             * @example 2026-01-02T03:04:05.678Z
                             */
                            next_run_at: string | null;
                            /** @description Schedules only */
                            timezone: string | null;
                            /**
                             * @default schedule
                             * @enum {string}
                             */
                            type: "schedule" | "webhook";
                            /**
                             * Format: date-time
                             * @description ISO 8601 UTC with milliseconds and Z
                             * @example 2026-01-02T03:04:05.678Z
                             */
                            updated_at: string;
                            /** @description Webhooks only: where to POST (no API key needed): /v1/hooks/<id>/<token>, the token being the credential; POST .../triggers/{trigger_id}/rotate gives it a new one */
                            url: string | null;
                            workflow_id: string;
                            /** @description The workflow's workspace */
                            workspace_id: string;
                        }[];
                        has_more: boolean;
                        next_cursor: string | null;
                        /**
                         * @description Request id, also in the X-Request-Id header
                         * @example req_01jbz3k9x8q7r6s5t4v3w2y1z0
                         */
                        request_id: string;
                    };
                };
            };
            /** @description The request is malformed: a field, the JSON, a cursor, a sort or a filter (param names it). error.code: invalid_json, validation_error, invalid_cursor, invalid_sort, invalid_filter */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description No API key, or one that is unknown, revoked or expired. error.code: unauthenticated */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description Not found, or not visible to this key. error.code: not_found */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description Too many requests: retry after Retry-After seconds. error.code: rate_limited */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description An internal error, logged with the request_id: quote it when reporting it. error.code: internal_error */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description The database or Redis is unreachable, or the service is shutting down: retry after Retry-After seconds. error.code: unavailable */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
        };
    };
    createTrigger: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": {
                    /**
                     * @description Five cron fields: minute hour day-of-month month day-of-week (a sixth field, seconds, is refused)
                     * @example 0 9 * * 1-5
                     */
                    cron?: string;
                    /** @description false pauses the trigger: no ticks, and hook calls answer 409 */
                    enabled?: boolean;
                    /**
                     * @description schedule: the run inputs as they are; webhook: for each input, a template over {{body.*}}, {{query.*}} and {{headers.*}} (header names lower-case). A template that is one placeholder keeps the value's JSON type
                     * @example {
                     *       "order_id": "{{body.order.id}}",
                     *       "source": "shop-{{headers.x-shop}}"
                     *     }
                     */
                    inputs?: {
                        [key: string]: unknown;
                    };
                    /** @description Webhook only: calls must carry X-Signature-256: sha256=<hex HMAC-SHA256 of the raw body>; stored encrypted, never returned */
                    secret?: string;
                    /**
                     * @description IANA time zone the cron fields are read in (default UTC); daylight-saving changes follow it
                     * @example Europe/Berlin
                     */
                    timezone?: string;
                    /** @enum {string} */
                    type: "schedule" | "webhook";
                };
            };
        };
        responses: {
            /** @description The trigger created */
            201: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        /**
                         * @description A trigger of a workflow; a webhook trigger's secret is never returned
                         * @example {
                         *       "id": "trg_01jbz3k9x8q7r6s5t4v3w2y1z0",
                         *       "workflow_id": "wf_01jbz3k9x8q7r6s5t4v3w2y1z0",
                         *       "workspace_id": "ws_01jbz3k9x8q7r6s5t4v3w2y1z0",
                         *       "type": "schedule",
                         *       "enabled": true,
                         *       "cron": "0 9 * * 1-5",
                         *       "timezone": "Europe/Berlin",
                         *       "inputs": {},
                         *       "next_run_at": "2026-01-05T08:00:00.000Z",
                         *       "last_run_at": null,
                         *       "last_run_id": null,
                         *       "url": null,
                         *       "created_at": "2026-01-02T03:04:05.678Z",
                         *       "updated_at": "2026-01-02T03:04:05.678Z"
                         *     }
                         */
                        data: {
                            /**
                             * Format: date-time
                             * @description ISO 8601 UTC with milliseconds and Z
                             * @example 2026-01-02T03:04:05.678Z
                             */
                            created_at: string;
                            /** @description Schedules only */
                            cron: string | null;
                            enabled: boolean;
                            id: string;
                            inputs: {
                                [key: string]: unknown;
                            };
                            /**
                             * Format: date-time
                             * @description ISO 8601 UTC with milliseconds and Z
                             * @example 2026-01-02T03:04:05.678Z
                             */
                            last_run_at: string | null;
                            last_run_id: string | null;
                            /**
                             * Format: date-time
                             * @description ISO 8601 UTC with milliseconds and Z
                             * @example 2026-01-02T03:04:05.678Z
                             */
                            next_run_at: string | null;
                            /** @description Schedules only */
                            timezone: string | null;
                            /**
                             * @default schedule
                             * @enum {string}
                             */
                            type: "schedule" | "webhook";
                            /**
                             * Format: date-time
                             * @description ISO 8601 UTC with milliseconds and Z
                             * @example 2026-01-02T03:04:05.678Z
                             */
                            updated_at: string;
                            /** @description Webhooks only: where to POST (no API key needed): /v1/hooks/<id>/<token>, the token being the credential; POST .../triggers/{trigger_id}/rotate gives it a new one */
                            url: string | null;
                            workflow_id: string;
                            /** @description The workflow's workspace */
                            workspace_id: string;
                        };
                        meta: {
                            deprecated_warnings: string[];
                            /** @constant */
                            version: "v1";
                        };
                        /**
                         * @description Request id, also in the X-Request-Id header
                         * @example req_01jbz3k9x8q7r6s5t4v3w2y1z0
                         */
                        request_id: string;
                    };
                };
            };
            /** @description The request is malformed: a field, the JSON, a cursor, a sort or a filter (param names it). error.code: invalid_json, validation_error, invalid_cursor, invalid_sort, invalid_filter */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description No API key, or one that is unknown, revoked or expired. error.code: unauthenticated */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description The key's role or workspace does not allow this. error.code: forbidden */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description Not found, or not visible to this key. error.code: not_found */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description Conflicts with the current state of the resource. error.code: run_not_running, run_not_waiting, idempotency_key_in_use, conflict */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description Understood but refused: a rule of the resource, or an Idempotency-Key reused with another request. error.code: idempotency_key_reused */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description Too many requests: retry after Retry-After seconds. error.code: rate_limited */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description An internal error, logged with the request_id: quote it when reporting it. error.code: internal_error */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description The database or Redis is unreachable, or the service is shutting down: retry after Retry-After seconds. error.code: unavailable */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
        };
    };
    getUsage: {
        parameters: {
            query?: {
                from?: string;
                to?: string;
            };
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The workspace's usage and budget */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        data: {
                            budget: {
                                credits: number;
                                hard_limit: boolean;
                                /** @constant */
                                period: "month";
                                period_start: string;
                                remaining: number;
                                thresholds: number[];
                                used: number;
                            } | null;
                            by_day: {
                                by_model: {
                                    calls: number;
                                    credits: number;
                                    model: string;
                                    tokens_in: number;
                                    tokens_out: number;
                                }[];
                                calls: number;
                                credits: number;
                                /** @description UTC day, YYYY-MM-DD */
                                day: string;
                                tokens_in: number;
                                tokens_out: number;
                            }[];
                            by_model: {
                                calls: number;
                                credits: number;
                                model: string;
                                tokens_in: number;
                                tokens_out: number;
                            }[];
                            /**
                             * Format: date-time
                             * @description ISO 8601 UTC with milliseconds and Z
                             * @example 2026-01-02T03:04:05.678Z
                             */
                            from: string;
                            /**
                             * Format: date-time
                             * @description ISO 8601 UTC with milliseconds and Z
                             * @example 2026-01-02T03:04:05.678Z
                             */
                            to: string;
                            total: {
                                calls: number;
                                credits: number;
                                tokens_in: number;
                                tokens_out: number;
                            };
                            workspace_id: string;
                        };
                        meta: {
                            deprecated_warnings: string[];
                            /** @constant */
                            version: "v1";
                        };
                        /**
                         * @description Request id, also in the X-Request-Id header
                         * @example req_01jbz3k9x8q7r6s5t4v3w2y1z0
                         */
                        request_id: string;
                    };
                };
            };
            /** @description The request is malformed: a field, the JSON, a cursor, a sort or a filter (param names it). error.code: invalid_json, validation_error, invalid_cursor, invalid_sort, invalid_filter */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description No API key, or one that is unknown, revoked or expired. error.code: unauthenticated */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description The key's role or workspace does not allow this. error.code: forbidden */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description Not found, or not visible to this key. error.code: not_found */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description Too many requests: retry after Retry-After seconds. error.code: rate_limited */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description An internal error, logged with the request_id: quote it when reporting it. error.code: internal_error */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description The database or Redis is unreachable, or the service is shutting down: retry after Retry-After seconds. error.code: unavailable */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
        };
    };
}
