import type { NotificationLevel } from '../bus/events.js';
import type { ClearView, NotificationView, PushFrame } from './types.js';

/** A row of `notifications` (with the viewer's read_seq when joined). */
export interface Row {
  id: string;
  seq: number;
  user_id: string | null;
  title: string;
  message: string;
  level: NotificationLevel;
  source: string | null;
  link: string | null;
  toast: boolean | number;
  cleared: boolean | number;
  sender?: string | null;
  created_at: number;
  updated_at: number;
  read_seq?: number | null;
}

export const iso = (ms: number) => new Date(Number(ms)).toISOString();

export function toView(r: Row, read: boolean, markCleared = false): NotificationView {
  const view: NotificationView = {
    id: r.id,
    seq: Number(r.seq),
    title: r.title,
    message: r.message,
    level: r.level,
    source: r.source ?? null,
    link: r.link ?? null,
    created_at: iso(r.created_at),
    updated_at: iso(r.updated_at),
    read,
    broadcast: r.user_id === null,
    toast: Boolean(r.toast),
  };
  if (markCleared && Boolean(r.cleared)) view.cleared = true;
  return view;
}

/** A stored row as the push it was (or a clear of it). */
export function toFrame(r: Row, read: boolean): PushFrame {
  const seq = Number(r.seq);
  const payload: NotificationView | ClearView = r.cleared ? { id: r.id, seq, action: 'clear', broadcast: r.user_id === null } : toView(r, read);
  return { event: r.user_id ? 'user:notify' : 'system:notify', userId: r.user_id, seq, payload };
}

export function isRead(r: Row, readAll: number): boolean {
  const seq = Number(r.seq);
  return seq <= readAll || (r.read_seq != null && Number(r.read_seq) >= seq);
}
