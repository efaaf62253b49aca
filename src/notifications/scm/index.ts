export {
  detectScmRequest,
  payloadOf,
  signatureFormProblem,
  verifyScmSignature,
  headerValue,
  tokenMatches,
  DELIVERY_ID,
  EVENT_NAME,
  GITHUB_SIGNATURE,
  HEX_SHA256,
  type RequestHeaders,
} from './headers.js';
export { normalizeScmEvent } from './normalize.js';
export { safeLink } from './common.js';
export { ScmPayloadError, type NormalizedScmEvent, type ScmNotification, type ScmProvider, type ScmRequest } from './types.js';
