import Joi from 'joi';
import { LEVELS } from './schema.js';

/**
 * The shapes the notifications API answers with (documentation: the API document is built from
 * them, and the contract check in the tests holds the answers to them).
 */

/** A stored notification as the history lists it (src/notifications/rows.ts toView). */
export const notificationView = Joi.object({
  id: Joi.string(),
  seq: Joi.number().integer(),
  title: Joi.string(),
  message: Joi.string().allow(''),
  level: Joi.string().valid(...LEVELS),
  source: Joi.string().allow(null),
  link: Joi.string().allow(null),
  created_at: Joi.string().isoDate(),
  updated_at: Joi.string().isoDate(),
  read: Joi.boolean(),
  broadcast: Joi.boolean().description('for everyone (else for the caller only)'),
  toast: Joi.boolean(),
  cleared: Joi.boolean().valid(true).optional().description('only on cleared notifications listed with `since`'),
}).id('Notification');

export const historyPageView = Joi.object({
  notifications: Joi.array().items(notificationView),
  unread: Joi.number().integer().description('unread notifications of the caller in all, not only on this page'),
  last_seq: Joi.number().integer().description('where to continue with `since`'),
  truncated: Joi.boolean().valid(true).optional().description('retention deleted notifications after `since`: this is not the whole story'),
});

/** What became of one sent notification (POST /api/notifications, each item of a batch). */
export const notificationReceipt = Joi.object({
  id: Joi.string(),
  seq: Joi.number().integer().allow(null).description('null when nothing was stored: `persist: false`, or a clear of an id never stored'),
}).id('NotificationReceipt');
