/* tests/macos/mach/mach.h — for the macOS syntax check
 * (tests/check_macos.py): the Mach calls and types compat.h uses, declared
 * as Apple's SDK declares them (<mach/mach_host.h>, <mach/task.h>,
 * <mach/host_info.h>, <mach/task_info.h>). Not a build header. */
#ifndef SHIM_MACH_H
#define SHIM_MACH_H
#include <stdint.h>
typedef int kern_return_t;
typedef int integer_t;
typedef unsigned int natural_t;
typedef natural_t mach_port_t, mach_port_name_t, mach_msg_type_number_t;
typedef mach_port_t host_t, task_t, task_name_t, ipc_space_t;
typedef uintptr_t vm_size_t;
typedef uint64_t mach_vm_size_t;
typedef integer_t host_flavor_t;
typedef natural_t task_flavor_t;
typedef integer_t *host_info64_t, *task_info_t;
#define KERN_SUCCESS 0
typedef struct {
    natural_t free_count, active_count, inactive_count, wire_count;
    uint64_t zero_fill_count, reactivations, pageins, pageouts, faults, cow_faults, lookups, hits, purges;
    natural_t purgeable_count, speculative_count;
    uint64_t decompressions, compressions, swapins, swapouts;
    natural_t compressor_page_count, throttled_count, external_page_count, internal_page_count;
    uint64_t total_uncompressed_pages_in_compressor;
} vm_statistics64_data_t;
#define HOST_VM_INFO64 4
#define HOST_VM_INFO64_COUNT ((mach_msg_type_number_t)(sizeof(vm_statistics64_data_t) / sizeof(integer_t)))
typedef struct {
    mach_vm_size_t virtual_size, resident_size, resident_size_max;
    struct { integer_t seconds, microseconds; } user_time, system_time;
    integer_t policy, suspend_count;
} mach_task_basic_info_data_t;
#define MACH_TASK_BASIC_INFO 20
#define MACH_TASK_BASIC_INFO_COUNT ((mach_msg_type_number_t)(sizeof(mach_task_basic_info_data_t) / sizeof(natural_t)))
mach_port_t mach_host_self(void);
mach_port_t mach_task_self(void);
kern_return_t host_page_size(host_t host, vm_size_t *out_page_size);
kern_return_t host_statistics64(host_t host, host_flavor_t flavor, host_info64_t info, mach_msg_type_number_t *count);
kern_return_t task_info(task_name_t task, task_flavor_t flavor, task_info_t info, mach_msg_type_number_t *count);
kern_return_t mach_port_deallocate(ipc_space_t task, mach_port_name_t name);
#endif
