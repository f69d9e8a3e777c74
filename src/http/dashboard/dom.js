/**
 * Building the dashboard's DOM: every view makes elements with h() and fills containers with fill(), so
 * text always goes in as text nodes (never as HTML) and an absent value never shows as a word.
 */

/** Creates an element: `h('div', {class: 'x', dataset: {k: 'v'}, onclick: fn}, child, 'text', …)`. */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === 'class') el.className = value;
    else if (key === 'dataset') Object.assign(el.dataset, value);
    else if (key === 'style') Object.assign(el.style, value);
    else if (key.startsWith('on')) el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, value === true ? '' : String(value));
  }
  el.append(...nodes(children));
  return el;
}

/** Whether a value is absent: null or undefined (an API leaves out or nulls what it does not know). */
export function absent(value) {
  return value === null || value === undefined;
}

/** A value to show, or a dash when it is absent; never the words "null" or "undefined". */
export function orDash(value) {
  return absent(value) ? '–' : value;
}

/** Children as nodes: nested arrays flattened, absent values and `false` left out, the rest as text. */
function nodes(children) {
  return children
    .flat(Number.POSITIVE_INFINITY)
    .filter((child) => !absent(child) && child !== false)
    .map((child) => (child instanceof Node ? child : String(child)));
}

/**
 * Replaces an element's children the way h() adds them. `el.replaceChildren(null)` would show the word
 * "null" (the review pane did, issue 23): every view fills its containers through this.
 */
export function fill(el, ...children) {
  el.replaceChildren(...nodes(children));
}
