import { newId } from '../../lib/ids'
import { start } from '../../machines/runner'
import { RUN_MACHINE_VERSION, runMachine } from '../../machines/workflow-run.machine'
import type { NewRun, RunRow } from '../../store/runs'

/** What starts a run: which version of which workflow, for whom, with which (validated) inputs. */
export type RunStart = Pick<RunRow, 'workflow_id' | 'workflow_version' | 'workspace_id' | 'user_id' | 'inputs' | 'request_id'>

/**
 * The row of a new run, whoever starts it (a caller, a trigger, a schedule's tick, a parent's node):
 * a fresh id and the run machine's initial snapshot at its current version.
 */
export function newRun(r: RunStart): NewRun {
  return {
    id: newId('run'),
    ...r,
    snapshot: start(runMachine, undefined as never).persisted as RunRow['snapshot'],
    machine_version: RUN_MACHINE_VERSION,
  }
}
