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
/**
 * Topic notified when a task joins the queue (approval creates it QUEUED; no task re-enters the queue by a
 * move). With CARDS_TOPIC it is all the scheduler listens to: a task's other moves (started, exited,
 * cleaned) change nothing a pass decides on; the cards they hold are freed by the lease's move, which
 * notifies CARDS_TOPIC, and a queued task that leaves by cancel_queued asks for its pass itself.
 */
export const QUEUE_TOPIC = 'queue';
/** Topic notified when cards may have become free (scheduler, dashboard). */
export const CARDS_TOPIC = 'cards';
/** Topic notified whenever a run records a step or ends. */
export const qualificationTopic = (id: string) => `qualification:${id}`;
/** Topic notified whenever a standing grant changes (its state or its counters). */
export const grantTopic = (id: string) => `standing-grant:${id}`;
/** Topic notified whenever any standing grant is created or changes (dashboard). */
export const GRANTS_TOPIC = 'standing-grants';
