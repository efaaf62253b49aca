export { detectScmRequest, verifyScmSignature, headerValue, tokenMatches, type RequestHeaders } from './headers.js';
export { normalizeScmEvent } from './normalize.js';
export { safeLink } from './common.js';
export {
  ScmPayloadError,
  type NormalizedScmEvent,
  type ScmNotification,
  type ScmProvider,
  type ScmRequest,
} from './types.js';
