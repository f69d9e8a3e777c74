/**
 * The notifier's topics (src/broker/notifier.ts): the names use cases announce after a commit and that
 * `wait_for_*`, the scheduler and the dashboard's event stream listen on. Kept apart from the use cases
 * so that the state machines (machines/), the tools and the loops all name them from below.
 */

/** Topic notified whenever a proposal changes. */
export const proposalTopic = (id: string) => `proposal:${id}`;
/** Topic notified whenever the review queue changes. */
export const REVIEW_QUEUE_TOPIC = 'review-queue';
/** Topic notified whenever a task changes. */
export const taskTopic = (id: string) => `task:${id}`;
/** Topic notified whenever any task is created or changes (scheduler, dashboard). */
export const TASKS_TOPIC = 'tasks';
/** Topic notified when cards may have become free (scheduler, dashboard). */
export const CARDS_TOPIC = 'cards';
/** Topic notified whenever a run records a step or ends. */
export const qualificationTopic = (id: string) => `qualification:${id}`;
/** Topic notified whenever a standing grant changes (its state or its counters). */
export const grantTopic = (id: string) => `standing-grant:${id}`;
/** Topic notified whenever any standing grant is created or changes (dashboard). */
export const GRANTS_TOPIC = 'standing-grants';
