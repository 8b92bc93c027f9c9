/** Effect and record in one plain mysql2 transaction on MySQL (test/suites/orm-transactions.suite.ts). */
import { databaseAvailable, describeOrmTransactions } from '../suites/orm-transactions.suite.js';

describeOrmTransactions('mysql2', 'mysql', await databaseAvailable('mysql'));
