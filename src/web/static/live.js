// The live connection to /ws: a one-time ticket per connect (POST /api/ws/ticket with the
// session cookie), reconnects with exponential backoff, and after every (re)connect asks for
// what it missed with `notifications:resume {since}`, so nothing is lost while offline.
//
// Events: 'state' ('connecting' | 'live' | 'offline'), 'notify' {event, payload, replay},
// 'resumed' {count, frames}, 'unauthorized'.

const MIN_DELAY = 500;
const MAX_DELAY = 10_000;
const PING_EVERY = 20_000;
const PONG_WAIT = 5_000;

export class LiveClient extends EventTarget {
  constructor() {
    super();
    this.lastSeq = 0;
    this.state = 'offline';
    this.ws = null;
    this.delay = MIN_DELAY;
    this.timer = null;
    this.pingTimer = null;
    this.pongTimer = null;
    this.replay = null; // frames of a running resume
    this.started = false;
    this.generation = 0;
    window.addEventListener('online', () => this.reconnectNow());
    window.addEventListener('offline', () => this.drop());
    document.addEventListener('visibilitychange', () => {
      if (document.visibilityState === 'visible' && this.state === 'offline') this.reconnectNow();
    });
  }

  start(since) {
    if (this.started) return;
    this.started = true;
    this.lastSeq = Math.max(this.lastSeq, Number(since) || 0);
    this.connect();
  }

  setState(state) {
    if (this.state === state) return;
    this.state = state;
    this.dispatchEvent(new CustomEvent('state', { detail: state }));
  }

  /** Drops the current socket at once (the network went away); reconnects with backoff. */
  drop() {
    if (!this.ws) return;
    const ws = this.ws;
    this.ws = null;
    this.generation++;
    ws.close();
    this.stopPing();
    this.setState('offline');
    this.schedule();
  }

  reconnectNow() {
    clearTimeout(this.timer);
    this.timer = null;
    this.delay = MIN_DELAY;
    if (this.ws) {
      // the old socket may be half dead after a network change: replace it
      const ws = this.ws;
      this.ws = null;
      this.generation++;
      ws.close();
      this.stopPing();
    }
    this.connect();
  }

  schedule() {
    if (this.timer) return;
    // full jitter keeps a restarted server from being hit by every tab at once
    const wait = Math.round(this.delay / 2 + Math.random() * (this.delay / 2));
    this.delay = Math.min(this.delay * 2, MAX_DELAY);
    this.timer = setTimeout(() => {
      this.timer = null;
      this.connect();
    }, wait);
  }

  async connect() {
    const generation = ++this.generation;
    this.setState('connecting');
    let ticket;
    try {
      const res = await fetch('/api/ws/ticket', { method: 'POST', credentials: 'same-origin', headers: { accept: 'application/json' } });
      if (res.status === 401) {
        this.setState('offline');
        this.dispatchEvent(new Event('unauthorized'));
        return;
      }
      if (!res.ok) throw new Error(`ticket: ${res.status}`);
      ticket = (await res.json()).ticket;
    } catch {
      if (generation !== this.generation) return;
      this.setState('offline');
      this.schedule();
      return;
    }
    if (generation !== this.generation) return;
    const url = `${location.protocol === 'https:' ? 'wss:' : 'ws:'}//${location.host}/ws?${new URLSearchParams({ ticket })}`;
    const ws = new WebSocket(url);
    this.ws = ws;
    ws.addEventListener('message', (e) => this.onFrame(ws, e.data));
    ws.addEventListener('close', () => {
      if (this.ws !== ws) return;
      this.ws = null;
      this.stopPing();
      this.setState('offline');
      this.schedule();
    });
  }

  send(event, payload) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify({ event, payload }));
  }

  resume() {
    this.replay = this.replay ?? [];
    this.send('notifications:resume', { since: this.lastSeq });
  }

  onFrame(ws, data) {
    if (this.ws !== ws) return;
    let frame;
    try {
      frame = JSON.parse(data);
    } catch {
      return;
    }
    const { event, payload } = frame;
    switch (event) {
      case 'gateway:welcome':
        this.delay = MIN_DELAY;
        this.setState('live');
        this.startPing();
        this.resume();
        break;
      case 'system:notify':
      case 'user:notify': {
        if (typeof payload?.seq === 'number') this.lastSeq = Math.max(this.lastSeq, payload.seq);
        const replay = this.replay !== null;
        if (replay) this.replay.push({ event, payload });
        this.dispatchEvent(new CustomEvent('notify', { detail: { event, payload, replay } }));
        break;
      }
      case 'notifications:resumed':
        this.lastSeq = Math.max(this.lastSeq, Number(payload?.last_seq) || 0);
        if (payload?.more) {
          this.send('notifications:resume', { since: this.lastSeq });
          break;
        }
        {
          const frames = this.replay ?? [];
          this.replay = null;
          this.dispatchEvent(new CustomEvent('resumed', { detail: { count: frames.length, frames } }));
        }
        break;
      case 'gateway:pong':
        clearTimeout(this.pongTimer);
        this.pongTimer = null;
        break;
      case 'gateway:error':
        console.warn('gateway error', payload);
        break;
      default:
        break;
    }
  }

  /** A ping the server must answer: a socket that silently died is noticed within seconds. */
  startPing() {
    this.stopPing();
    this.pingTimer = setInterval(() => {
      if (this.pongTimer) return;
      this.send('gateway:ping', {});
      this.pongTimer = setTimeout(() => this.drop(), PONG_WAIT);
    }, PING_EVERY);
  }

  stopPing() {
    clearInterval(this.pingTimer);
    clearTimeout(this.pongTimer);
    this.pingTimer = null;
    this.pongTimer = null;
  }
}
