import Logging
import RoundupRuntime
import RoundupWorker

await RoundupProcess.main(label: "roundup.worker", failure: "worker failed", run: WorkerApplication.run(configuration:registry:logger:))
