/** The gateway's limits and timings (SERVICE_WS_MAX_CONNECTIONS_PER_USER sets one; tests shorten others). */
export interface GatewayOptions {
  path: string;
  /** larger frames close the connection with 1009 (ws does it) */
  maxPayload: number;
  /** ping every interval; a peer that did not pong since the last one is dropped */
  heartbeatMs: number;
  /** a connection with more than this queued for sending is closed with 1013 */
  maxBufferedBytes: number;
  /** how long a closed slow consumer may take to drain the close frame before it is cut */
  slowCloseGraceMs: number;
  /** live pushes held back during a welcome or replay at most; beyond that the client is slow (1013) */
  maxHeldFrames: number;
  /** how often every open connection's credential is checked again (a backstop to the change events) */
  revalidateMs: number;
  /** open connections per user (or system key) on this instance; one more gets gateway:error and 1008 */
  maxConnectionsPerUser: number;
  /** client frames per second a connection may send on average, and in a burst; beyond: gateway:error and 1008 */
  frameRate: number;
  frameBurst: number;
  /** a replay pauses while this much is queued for the socket, so a resume cannot flood memory */
  replayHighWaterBytes: number;
}

export const DEFAULT_GATEWAY_OPTIONS: GatewayOptions = {
  path: '/ws',
  maxPayload: 64 * 1024,
  heartbeatMs: 30_000,
  maxBufferedBytes: 1024 * 1024,
  slowCloseGraceMs: 10_000,
  maxHeldFrames: 5000,
  revalidateMs: 30_000,
  maxConnectionsPerUser: 20,
  frameRate: 20,
  frameBurst: 60,
  replayHighWaterBytes: 256 * 1024,
};
