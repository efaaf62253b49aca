/** GitLab webhook payloads (doc/user/project/integrations/webhook_events.md). */
import Joi from 'joi';
import {
  ciOutcome,
  describeRef,
  extract,
  firstLine,
  firstLink,
  firstOf,
  ignored,
  isSha,
  isZeroSha,
  linkBelow,
  notify,
  optionalText,
  plural,
  userName,
  userSchema,
  type PayloadUser,
} from './common.js';
import type { NormalizedScmEvent } from './types.js';

interface Project {
  path_with_namespace: string;
  web_url?: string | null;
}

const projectSchema = Joi.object({
  path_with_namespace: Joi.string().required(),
  web_url: optionalText,
}).required();

const commitMessageSchema = Joi.object({ message: optionalText, url: optionalText }).allow(null);

// ---- Push Hook / Tag Push Hook -------------------------------------------------------------

interface PushPayload {
  ref: string;
  before?: string | null;
  after?: string | null;
  user_username?: string | null;
  user_name?: string | null;
  total_commits_count?: number;
  commits?: Array<{ message?: string | null; url?: string | null } | null> | null;
  project: Project;
}

const pushSchema = Joi.object({
  ref: Joi.string().required(),
  before: optionalText,
  after: optionalText,
  user_username: optionalText,
  user_name: optionalText,
  total_commits_count: Joi.number().integer().min(0),
  commits: Joi.array().items(commitMessageSchema).allow(null),
  project: projectSchema,
}).required();

function gitlabPush(payload: unknown): NormalizedScmEvent {
  const push = extract<PushPayload>(pushSchema, payload);
  const repo = push.project.path_with_namespace;
  const web = push.project.web_url;
  const { kind, name } = describeRef(push.ref);
  const actor = firstOf(push.user_username, push.user_name) ?? 'someone';
  const commits = push.commits ?? [];
  const count = push.total_commits_count ?? commits.length;
  // GitLab lists commits oldest first; the last one is the new head.
  const head = commits[commits.length - 1];
  const headLine = firstLine(head?.message);

  if (isZeroSha(push.after)) {
    return notify('gitlab', {
      title: `[${repo}] ${actor} deleted ${kind} ${name}`,
      message: `The ${kind} ${name} was deleted.`,
      level: 'info',
      link: firstLink(web),
    });
  }
  const refPage = kind === 'tag' ? linkBelow(web, '-', 'tags', name) : linkBelow(web, '-', 'tree', name);
  if (isZeroSha(push.before)) {
    const withCommits = kind === 'branch' && count > 0 ? ` with ${plural(count, 'commit')}` : '';
    return notify('gitlab', {
      title: `[${repo}] ${actor} created ${kind} ${name}${withCommits}`,
      message: headLine ?? `New ${kind} ${name}`,
      level: 'info',
      link: firstLink(refPage, web),
    });
  }
  const compare = isSha(push.before) && isSha(push.after) ? linkBelow(web, '-', 'compare', `${push.before}...${push.after}`) : null;
  return notify('gitlab', {
    title: `[${repo}] ${actor} pushed ${plural(count, 'commit')} to ${name}`,
    message: headLine ?? `${plural(count, 'commit')} on ${kind} ${name}`,
    level: 'info',
    link: firstLink(compare, head?.url, refPage, web),
  });
}

// ---- Merge Request Hook --------------------------------------------------------------------

interface MergeRequestPayload {
  object_attributes: {
    iid: number;
    title: string;
    url?: string | null;
    source_branch?: string | null;
    target_branch?: string | null;
  };
  user?: PayloadUser | null;
  project: Project;
}

const mergeRequestSchema = Joi.object({
  object_attributes: Joi.object({
    iid: Joi.number().integer().required(),
    title: Joi.string().required(),
    url: optionalText,
    source_branch: optionalText,
    target_branch: optionalText,
  }).required(),
  user: userSchema,
  project: projectSchema,
}).required();

const attributesAction = Joi.object({
  object_attributes: Joi.object({ action: optionalText }).required(),
}).required();

function objectAction(payload: unknown): string | undefined {
  return firstOf(extract<{ object_attributes: { action?: string | null } }>(attributesAction, payload).object_attributes.action);
}

const MERGE_REQUEST_VERBS = new Map([
  ['open', 'opened'],
  ['reopen', 'reopened'],
  ['close', 'closed'],
  ['merge', 'merged'],
]);

function gitlabMergeRequest(payload: unknown): NormalizedScmEvent {
  const action = objectAction(payload);
  const verb = action ? MERGE_REQUEST_VERBS.get(action) : undefined;
  if (!verb) return ignored(`merge request action "${action ?? ''}" is not notified`);
  const event = extract<MergeRequestPayload>(mergeRequestSchema, payload);
  const mr = event.object_attributes;
  const source = firstOf(mr.source_branch);
  const target = firstOf(mr.target_branch);
  const branches = source && target ? ` (${source} → ${target})` : '';
  return notify('gitlab', {
    title: `[${event.project.path_with_namespace}] Merge request !${mr.iid} ${verb}`,
    message: `${mr.title}${branches} by ${userName(event.user)}`,
    level: verb === 'merged' ? 'success' : 'info',
    link: firstLink(mr.url),
  });
}

// ---- Issue Hook ----------------------------------------------------------------------------

interface IssuePayload {
  object_attributes: { iid: number; title: string; url?: string | null; confidential?: boolean | null };
  user?: PayloadUser | null;
  project: Project;
}

const issueSchema = Joi.object({
  object_attributes: Joi.object({
    iid: Joi.number().integer().required(),
    title: Joi.string().required(),
    url: optionalText,
    confidential: Joi.boolean().allow(null),
  }).required(),
  user: userSchema,
  project: projectSchema,
}).required();

const ISSUE_VERBS = new Map([
  ['open', 'opened'],
  ['reopen', 'reopened'],
  ['close', 'closed'],
]);

function gitlabIssue(payload: unknown): NormalizedScmEvent {
  const action = objectAction(payload);
  const verb = action ? ISSUE_VERBS.get(action) : undefined;
  if (!verb) return ignored(`issue action "${action ?? ''}" is not notified`);
  const event = extract<IssuePayload>(issueSchema, payload);
  const issue = event.object_attributes;
  // Notifications are broadcast to every user: a confidential title must not leak that way.
  if (issue.confidential === true) return ignored('confidential issues are not broadcast');
  return notify('gitlab', {
    title: `[${event.project.path_with_namespace}] Issue #${issue.iid} ${verb}`,
    message: `${issue.title} by ${userName(event.user)}`,
    level: 'info',
    link: firstLink(issue.url),
  });
}

// ---- Pipeline Hook -------------------------------------------------------------------------

interface PipelinePayload {
  object_attributes: { id: number; status: string; ref?: string | null; url?: string | null; name?: string | null };
  commit?: { message?: string | null } | null;
  project: Project;
}

const pipelineSchema = Joi.object({
  object_attributes: Joi.object({
    id: Joi.number().integer().required(),
    status: Joi.string().required(),
    ref: optionalText,
    url: optionalText,
    name: optionalText,
  }).required(),
  commit: commitMessageSchema,
  project: projectSchema,
}).required();

function gitlabPipeline(payload: unknown): NormalizedScmEvent {
  const event = extract<PipelinePayload>(pipelineSchema, payload);
  const pipeline = event.object_attributes;
  const outcome = ciOutcome(pipeline.status);
  if (!outcome) return ignored(`pipeline status "${pipeline.status}" is not notified`);
  const ref = firstOf(pipeline.ref);
  return notify('gitlab', {
    title: `[${event.project.path_with_namespace}] Pipeline #${pipeline.id} ${outcome.phrase}${ref ? ` on ${ref}` : ''}`,
    message: firstOf(pipeline.name, firstLine(event.commit?.message)) ?? `Pipeline ${pipeline.status}`,
    level: outcome.level,
    toast: outcome.toast,
    // `url` arrived in later GitLab versions; older ones only give the project page.
    link: firstLink(pipeline.url, linkBelow(event.project.web_url, '-', 'pipelines', pipeline.id), event.project.web_url),
  });
}

// ---- Job Hook ------------------------------------------------------------------------------

interface JobPayload {
  build_id: number;
  build_name: string;
  build_status: string;
  build_stage?: string | null;
  build_allow_failure?: boolean | null;
  ref?: string | null;
  pipeline_id?: number | null;
  project_name?: string | null;
  project?: { path_with_namespace?: string | null; web_url?: string | null } | null;
  repository?: { name?: string | null; homepage?: string | null } | null;
  commit?: { message?: string | null } | null;
}

const jobSchema = Joi.object({
  build_id: Joi.number().integer().required(),
  build_name: Joi.string().required(),
  build_status: Joi.string().required(),
  build_stage: optionalText,
  build_allow_failure: Joi.boolean().allow(null),
  ref: optionalText,
  pipeline_id: Joi.number().integer().allow(null),
  project_name: optionalText,
  // Older GitLab versions send no `project` object in job events.
  project: Joi.object({ path_with_namespace: optionalText, web_url: optionalText }).allow(null),
  repository: Joi.object({ name: optionalText, homepage: optionalText }).allow(null),
  commit: commitMessageSchema,
}).required();

function gitlabJob(payload: unknown): NormalizedScmEvent {
  const job = extract<JobPayload>(jobSchema, payload);
  let outcome = ciOutcome(job.build_status);
  if (!outcome) return ignored(`job status "${job.build_status}" is not notified`);
  if (outcome.level === 'error' && job.build_allow_failure === true) {
    outcome = { level: 'warning', toast: true, phrase: 'failed (allowed to fail)' };
  }
  const repo = firstOf(job.project?.path_with_namespace, job.project_name, job.repository?.name) ?? 'GitLab';
  const projectPage = firstLink(job.project?.web_url, job.repository?.homepage);
  const stage = firstOf(job.build_stage);
  const ref = firstOf(job.ref);
  const pipeline = typeof job.pipeline_id === 'number' ? `Pipeline #${job.pipeline_id}` : undefined;
  return notify('gitlab', {
    title: `[${repo}] Job ${job.build_name}${stage ? ` (${stage})` : ''} ${outcome.phrase}${ref ? ` on ${ref}` : ''}`,
    message: firstOf(firstLine(job.commit?.message), pipeline) ?? `Job ${job.build_status}`,
    level: outcome.level,
    toast: outcome.toast,
    link: firstLink(linkBelow(projectPage, '-', 'jobs', job.build_id), projectPage),
  });
}

// ---- Release Hook --------------------------------------------------------------------------

interface ReleasePayload {
  tag: string;
  name?: string | null;
  url?: string | null;
  project: Project;
}

const releaseSchema = Joi.object({
  tag: Joi.string().required(),
  name: optionalText,
  url: optionalText,
  project: projectSchema,
}).required();

function gitlabRelease(payload: unknown): NormalizedScmEvent {
  const { action } = extract<{ action?: string | null }>(Joi.object({ action: optionalText }).required(), payload);
  if (action !== 'create') return ignored(`release action "${action ?? ''}" is not notified`);
  const release = extract<ReleasePayload>(releaseSchema, payload);
  return notify('gitlab', {
    title: `[${release.project.path_with_namespace}] Release ${firstOf(release.name, release.tag) ?? release.tag} published`,
    message: `Tag ${release.tag}`,
    level: 'success',
    link: firstLink(release.url, linkBelow(release.project.web_url, '-', 'releases', release.tag)),
  });
}

// ---- dispatch ------------------------------------------------------------------------------

/** System hooks carry push, tag push and merge request payloads; which one is in `object_kind`. */
function gitlabSystemHook(payload: unknown): NormalizedScmEvent {
  const { object_kind: kind } = extract<{ object_kind?: string | null }>(Joi.object({ object_kind: optionalText }).required(), payload);
  if (kind === 'push' || kind === 'tag_push') return gitlabPush(payload);
  if (kind === 'merge_request') return gitlabMergeRequest(payload);
  return ignored(`system hook "${kind ?? ''}" is not notified`);
}

const GITLAB_HANDLERS = new Map<string, (payload: unknown) => NormalizedScmEvent>(
  Object.entries({
    'push hook': gitlabPush,
    'tag push hook': gitlabPush,
    'merge request hook': gitlabMergeRequest,
    'issue hook': gitlabIssue,
    'pipeline hook': gitlabPipeline,
    'job hook': gitlabJob,
    'release hook': gitlabRelease,
    'system hook': gitlabSystemHook,
  }),
);

export function normalizeGitlab(event: string, payload: unknown): NormalizedScmEvent {
  const name = event.trim().toLowerCase();
  if (name === 'confidential issue hook') return ignored('confidential issues are not broadcast');
  const handler = GITLAB_HANDLERS.get(name);
  return handler ? handler(payload) : ignored(`gitlab event "${event}" is not notified`);
}
