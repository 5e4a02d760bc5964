export * from './types.js';
export { Queue, QUEUE_CHANNEL, FOLD_PARAM, FoldRejected, type EnqueueFold, type FinishItem, type MaintainResult, type PendingFilter } from './queue.js';
export { Worker, type HandlerContext, type JobHandler, type WorkerOptions } from './worker.js';
