-- Agents and conversations (docs/agents.md). An agent's definition changes in place and
-- its version goes up by one; each message records the version that answered it.

create table agents (
  id                 text primary key,
  workspace_id       text not null references workspaces (id) on delete cascade,
  name               text not null,
  type               text not null check (type in ('agent', 'chatflow')),
  model              text not null,
  instructions       text not null default '',
  tools              jsonb not null default '[]',
  knowledge_base_ids text[] not null default '{}',
  workflow_id        text references workflows (id) on delete set null,
  status             text not null default 'active' check (status in ('active', 'disabled')),
  version            integer not null default 1,
  created_by         text not null,
  created_at         timestamptz(3) not null default now(),
  updated_at         timestamptz(3) not null default now()
);
create index agents_workspace_idx on agents (workspace_id, created_at, id);

create table conversations (
  id            text primary key,
  agent_id      text not null references agents (id) on delete cascade,
  workspace_id  text not null references workspaces (id) on delete cascade,
  user_id       text not null,
  title         text not null,
  message_count integer not null default 0,
  created_at    timestamptz(3) not null default now(),
  updated_at    timestamptz(3) not null default now()
);
-- The conversation list of an agent's user, newest activity first.
create index conversations_agent_user_idx on conversations (agent_id, user_id, updated_at, id);

create table messages (
  id              text primary key,
  conversation_id text not null references conversations (id) on delete cascade,
  role            text not null check (role in ('user', 'assistant')),
  content         text not null,
  -- Assistant messages: the agent version that answered, its tool calls ({ tool, input, output,
  -- duration_ms }), usage ({ tokens_in, tokens_out, credits }), why it ended, and a chatflow's run.
  agent_version   integer,
  tool_calls      jsonb not null default '[]',
  usage           jsonb,
  finish_reason   text,
  run_id          text,
  request_id      text,
  created_at      timestamptz(3) not null default now()
);
create index messages_conversation_idx on messages (conversation_id, created_at, id);
