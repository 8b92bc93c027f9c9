/**
 * Internal: the one place that tells when the client left before its response was sent,
 * from Node's response (the Node-based adapters, and the fetch and Hono adapters on
 * @hono/node-server). Imports nothing at run time, so the web entries can share it.
 * @module
 */
import type { ServerResponse } from 'node:http';

/**
 * Call `gone` once the response closes before it finished (the client left), or at once
 * when it already has (it left while the claim was being made). `ended` says whether the
 * response ended first on the adapter's side (its bytes are on their way). `on` is the
 * response's own `on`, for a caller that found it without a load on the response (Express's
 * re-prototyped ones).
 */
export function whenClientGone(res: ServerResponse, gone: () => void, ended?: () => boolean, on: ServerResponse['on'] = res.on): void {
  const onClose = () => {
    if (!res.writableFinished && !ended?.()) gone();
  };
  if (res.destroyed) onClose();
  // A response emits 'close' once: `on` spares the wrapper `once` would build per request.
  else on.call(res, 'close', onClose);
}
