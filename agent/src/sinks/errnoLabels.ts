// The errno values a label may carry: every name the platform knows. A closed
// set, so a corrupt probe line cannot mint new series.
import os from "node:os";

export const ERRNO_LABELS = Object.keys(os.constants.errno) as readonly string[];
