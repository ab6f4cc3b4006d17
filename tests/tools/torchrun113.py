# Runs Debian's torchrun 1.13 on Python 3.11: Std.from_str relies on iterating an IntFlag yielding NONE (0).
import re, sys
from torch.distributed.elastic.multiprocessing import api
def from_str(vm):
    if re.match(api._VALUE_REGEX, vm):
        return api.Std(int(vm))
    if re.match(api._MAPPING_REGEX, vm):
        return {int(i): api.Std(int(v)) for i, v in (m.split(":") for m in vm.split(","))}
    raise ValueError(vm)
api.Std.from_str = classmethod(lambda cls, vm: from_str(vm))
from torch.distributed.run import main
sys.exit(main())
